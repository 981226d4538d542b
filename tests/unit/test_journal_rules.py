"""The journal's values (app/domain/journal.py): an entry survives its line, segment keys sort in journal order
and are found past a position, a person is a keyed hash, and the guard's verdict."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.journal import (KINDS, Entry, GuardState, after_position, installations, line, parse_line,
                                parse_segment, segment_key, subject_hash)
from app.platform import config
from app.errors import ConfigError

INSTALLATION = uuid.UUID("6a0b6f4e-2b8d-4c55-9d43-0d1c3b7e9a10")
AT = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


@given(st.sampled_from(KINDS), st.lists(st.uuids(), max_size=5), st.none() | st.sampled_from(["file", "restore"]),
       st.none() | st.text("0123456789abcdef", min_size=64, max_size=64), st.none() | st.uuids(),
       st.integers(1, 10**12))
def test_an_entry_survives_its_line(kind, files, via, subject, hold, seq):
    entry = Entry(kind, AT, files=tuple(files), via=via, subject=subject, hold=hold, seq=seq)
    assert parse_line(line(entry)) == entry
    assert "null" not in line(entry)


def test_a_line_that_is_no_entry_is_refused():
    for text in ('{"kind": "file.renamed", "seq": 1, "at": "2026-01-01T00:00:00+00:00"}', '{"kind": "file.marked"}',
                 "not json"):
        with pytest.raises(ValueError):
            parse_line(text)


def test_segment_keys_sort_in_journal_order_and_are_found_past_a_position():
    keys = [segment_key(INSTALLATION, first, last, AT) for first, last in ((1, 9), (10, 10), (11, 5000), (5001, 5002))]
    assert keys == sorted(keys)
    for position, expected in ((0, 4), (9, 3), (10, 2), (11, 1), (5000, 1), (5001, 0)):
        start = after_position(INSTALLATION, position)
        assert sum(1 for key in keys if key > start) == expected, position
    segment = parse_segment(keys[2], INSTALLATION)
    assert segment is not None and (segment.first, segment.last) == (11, 5000)
    assert parse_segment(keys[2], uuid.uuid4()) is None
    assert parse_segment(f"journal/{INSTALLATION}/notes.txt", INSTALLATION) is None
    assert installations(keys + ["journal/other/x", "f/aa/bb/x"]) == {str(INSTALLATION), "other"}


def test_a_person_is_a_keyed_hash_and_nothing_more():
    person = uuid.uuid4()
    hashed = subject_hash("k" * 64, person)
    assert len(hashed) == 64 and str(person) not in hashed and person.hex not in hashed
    assert hashed == subject_hash("k" * 64, person) != subject_hash("other key", person)


def test_the_guard_waits_while_the_journal_holds_more_or_cannot_be_read():
    assert GuardState(5, 5).reason is None
    assert GuardState(5, 9).reason == "restore_pending" and GuardState(5, 9).behind
    assert GuardState(5, 5, readable=False).reason == "journal_unreadable"


def test_the_journal_outlives_the_backups():
    with pytest.raises(ConfigError) as info:
        config.load({"LETHE_JOURNAL_RETENTION": "30d", "LETHE_JOURNAL_BACKUP_RETENTION": "35d"})
    assert set(info.value.errors) == {"journal.retention"}
    assert config.load({"LETHE_JOURNAL_RETENTION": "36d", "LETHE_JOURNAL_BACKUP_RETENTION": "35d"})
