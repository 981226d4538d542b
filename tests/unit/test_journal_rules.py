"""The journal's values (app/domain/journal.py): an entry survives its line, segment keys (old and new) sort in
journal order and are found past a position, a segment verifies (its header, its lines, its numbers, the digest of
the one before it) and names the line of any damage, a person is a keyed hash, and the guard's verdict."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.journal import (
    KINDS,
    Damage,
    Entry,
    GuardState,
    SegmentDamaged,
    after_position,
    chain,
    digest,
    installations,
    legacy_segment_key,
    line,
    parse_line,
    parse_segment,
    read_segment,
    read_spool,
    render_segment,
    render_spool,
    segment_key,
    spool_key,
    subject_hash,
)
from app.errors import ConfigError
from app.platform import config

INSTALLATION = uuid.UUID("6a0b6f4e-2b8d-4c55-9d43-0d1c3b7e9a10")
AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@given(
    st.sampled_from(KINDS),
    st.lists(st.uuids(), max_size=5),
    st.none() | st.sampled_from(["file", "restore"]),
    st.none() | st.text("0123456789abcdef", min_size=64, max_size=64),
    st.none() | st.uuids(),
    st.integers(1, 10**12),
)
def test_an_entry_survives_its_line(kind, files, via, subject, hold, seq):
    entry = Entry(kind, AT, files=tuple(files), via=via, subject=subject, hold=hold, seq=seq)
    assert parse_line(line(entry)) == entry
    assert "null" not in line(entry)


def test_a_line_that_is_no_entry_is_refused():
    for text in (
        '{"kind": "file.renamed", "seq": 1, "at": "2026-01-01T00:00:00+00:00"}',
        '{"kind": "file.marked"}',
        "not json",
    ):
        with pytest.raises(ValueError):
            parse_line(text)


def test_segment_keys_sort_in_journal_order_and_are_found_past_a_position():
    # segments of the release before headers (numbers in the key), then today's (the first number only)
    keys = [legacy_segment_key(INSTALLATION, first, last, AT) for first, last in ((1, 9), (10, 10))] + [
        segment_key(INSTALLATION, first) for first in (11, 5001)
    ]
    assert keys == sorted(keys)
    spool = spool_key(INSTALLATION, uuid.uuid4())
    for position, expected in ((0, 4), (9, 3), (10, 2), (11, 1), (5000, 1), (5001, 0)):
        start = after_position(INSTALLATION, position)
        assert sum(1 for key in keys if key > start) == expected, position
        assert spool > start  # the spool is always listed past the position
    segment = parse_segment(keys[1], INSTALLATION)
    assert segment is not None and (segment.first, segment.last) == (10, 10) and segment.legacy
    segment = parse_segment(keys[2], INSTALLATION)
    assert segment is not None and (segment.first, segment.last) == (11, None) and not segment.legacy
    assert parse_segment(spool, INSTALLATION) is None
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


def entries(first: int, last: int) -> list[Entry]:
    return [Entry("file.marked", AT, files=(uuid.uuid4(),), via="file", seq=seq) for seq in range(first, last + 1)]


def segment_of(first: int, last: int, prev: str | None = None):
    text = render_segment(first, last, prev, entries(first, last))
    found = parse_segment(segment_key(INSTALLATION, first), INSTALLATION)
    assert found is not None
    return found, text


def test_a_segment_reads_back_as_written_and_the_same_entries_give_the_same_text():
    segment, text = segment_of(6, 24)
    read = read_segment(segment, text)
    assert (read.first, read.last, len(read.entries)) == (6, 24, 19) and read.digest == digest(text)
    assert [entry.seq for entry in read.entries] == list(range(6, 25))
    again = render_segment(6, 24, None, list(read.entries))
    assert again == text


def damaged(segment, text) -> Damage:
    with pytest.raises(SegmentDamaged) as info:
        read_segment(segment, text)
    assert info.value.damage.where == segment.key
    return info.value.damage


def test_lines_removed_from_a_segment_are_found_and_named():
    segment, text = segment_of(6, 24)
    lines = text.splitlines(keepends=True)
    # Three lines removed from its middle: the digest of its entries and the numbers both say so
    damage = damaged(segment, "".join(lines[:5] + lines[8:]))
    assert "digest" in damage.what
    # The same with a header made to agree with what is left: the numbers still say so, at the line
    body = "".join(lines[1:5] + lines[8:])
    forged = f'{{"entries":"{digest(body)}","first":6,"journal":1,"last":24,"prev":null}}\n'
    damage = damaged(segment, forged + body)
    assert damage.line == 6 and "entry 10 was expected" in damage.what  # the header is line 1
    # Its last lines cut off (a truncated write), header untouched
    damage = damaged(segment, "".join(lines[:-3]))
    assert "digest" in damage.what
    forged = f'{{"entries":"{digest("".join(lines[1:-3]))}","first":6,"journal":1,"last":24,"prev":null}}\n'
    assert "21" in damaged(segment, forged + "".join(lines[1:-3])).what
    # Cut in the middle of a line
    assert "whole line" in damaged(segment, text[:-10]).what


@given(st.binary(min_size=1, max_size=200), st.integers(0, 2000))
def test_a_garbled_segment_is_damage_named_by_its_line_never_an_exception_of_another_kind(garbage, at):
    segment, text = segment_of(1, 20)
    at = at % len(text)
    garbled = text[:at] + garbage.decode("latin-1") + text[at:]
    try:
        read = read_segment(segment, garbled)
    except SegmentDamaged as exc:
        assert exc.damage.where == segment.key and exc.damage.describe()
    else:
        assert [entry.seq for entry in read.entries] == list(range(1, 21))


def test_an_accepted_damage_yields_what_can_be_read():
    segment, text = segment_of(6, 24)
    lines = text.splitlines(keepends=True)
    read = read_segment(segment, "".join(lines[:5] + ["garbage\n"] + lines[8:]), accept=True)
    assert [entry.seq for entry in read.entries] == list(range(6, 10)) + list(range(13, 25))


def test_a_legacy_segment_is_read_by_its_numbers():
    old = entries(10, 12)
    key = legacy_segment_key(INSTALLATION, 10, 12, AT)
    segment = parse_segment(key, INSTALLATION)
    assert segment is not None
    text = "".join(line(entry) + "\n" for entry in old)
    assert [entry.seq for entry in read_segment(segment, text).entries] == [10, 11, 12]
    assert "10..11" in damaged(segment, "".join(line(entry) + "\n" for entry in old[:2])).what


def test_the_chain_finds_missing_numbers_and_a_replaced_segment():
    first_segment, first_text = segment_of(1, 5)
    first = read_segment(first_segment, first_text)
    second_segment, second_text = segment_of(6, 9, prev=first.digest)
    second = read_segment(second_segment, second_text)
    third_segment, third_text = segment_of(12, 14, prev="0" * 64)
    third = read_segment(third_segment, third_text)
    chain(0, None, [first, second])  # whole
    with pytest.raises(SegmentDamaged) as info:
        chain(0, None, [first, second, third])
    assert info.value.damage.where.endswith("0000000000000010-0000000000000011 (missing)")
    chain(0, None, [first, second, third], accepted=frozenset({info.value.damage.where}))
    # a first segment replaced by another of the same numbers: the next one's header says it was not this one
    replaced = read_segment(first_segment, render_segment(1, 5, None, entries(1, 5)))
    with pytest.raises(SegmentDamaged) as info:
        chain(0, None, [replaced, second])
    assert info.value.damage.where == second_segment.key
    # past the position, only what follows it counts; the database's own digest of the last it wrote is checked
    chain(5, first.digest, [second])
    with pytest.raises(SegmentDamaged):
        chain(5, "f" * 64, [second])
    with pytest.raises(SegmentDamaged) as info:
        chain(3, None, [second])
    assert "4-0000000000000005 (missing)" in info.value.damage.where


def test_a_spool_holds_entries_with_their_ids():
    spooled = [Entry("file.marked", AT, files=(uuid.uuid4(),), id=uuid.uuid4()) for _ in range(3)]
    key = spool_key(INSTALLATION, uuid.uuid4())
    assert read_spool(key, render_spool(spooled)) == spooled
    with pytest.raises(SegmentDamaged):
        read_spool(key, render_spool(spooled)[:-20] + "\n")


def test_the_guard_names_damage_and_an_adoption_before_a_restore():
    damage = Damage("journal/x/0000000000000006.jsonl", "bad", 3)
    assert GuardState(5, 9, damaged=damage).reason == "journal_damaged"
    assert GuardState(0, 0, adoptable=("other",)).reason == "journal_adoption_pending"
    assert GuardState(5, 5, unknown_spooled=2).reason == "restore_pending"
