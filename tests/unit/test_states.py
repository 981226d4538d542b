"""The rules of a file's states (app/domain/states.py) that decide a scan's outcome."""

from __future__ import annotations


def test_a_scan_outcome_is_written_only_while_the_file_awaits_it():
    from app.domain.states import awaits_scan

    assert awaits_scan("complete", "pending", deleted=False)
    assert not awaits_scan("complete", "pending", deleted=True)
    assert not awaits_scan("uploading", "pending", deleted=False)
    assert not awaits_scan("complete", "clean", deleted=False)


def test_a_measured_scan_fails_the_file_when_its_bytes_are_not_the_declared_ones():
    from app.domain.states import checked_outcome

    assert checked_outcome("clean", (5, "ab"), 5, "ab") == "clean"
    assert checked_outcome("clean", (5, "ab"), 5, None) == "clean"  # no digest declared: the size alone
    assert checked_outcome("clean", (4, "ab"), 5, "ab") == "failed"
    assert checked_outcome("infected", (5, "cd"), 5, "ab") == "failed"  # a mismatch wins over any verdict
