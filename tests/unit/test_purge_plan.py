"""Purge planning and the keys of a file (D7): pure. Every key of a file comes from FileObjects, and every key
read back parses to its file and kind."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.keys import KeySchemaError, original_key, part_key, tail_key, validate_key, variant_key
from app.domain.objects import FileObjects, owner_of, parse
from app.domain.purge_plan import PurgeAction, PurgeFacts, has_parts, objects_of, plan_purge


def object_keys_of(file_id, stored):
    return FileObjects(file_id, stored).object_keys()


def tail_keys_of(facts):
    return [key for key in objects_of(facts).object_keys() if key.endswith("/tail")]


NOW = datetime(2026, 1, 1, tzinfo=UTC)
ID = uuid.UUID("6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a11")


@pytest.mark.parametrize(
    "facts, action",
    [
        (PurgeFacts(ID, exists=False), PurgeAction.NOTHING),
        (
            PurgeFacts(ID, True, deleted_at=NOW, upload_state="complete", scan_status="clean"),
            PurgeAction.OBJECTS_AND_ROW,
        ),
        (PurgeFacts(ID, True, deleted_at=NOW, upload_state="uploading"), PurgeAction.OBJECTS_AND_ROW),
        (PurgeFacts(ID, True, upload_state="failed"), PurgeAction.OBJECTS),
        (PurgeFacts(ID, True, upload_state="complete", scan_status="infected"), PurgeAction.OBJECTS),
        (PurgeFacts(ID, True, upload_state="complete", scan_status="error"), PurgeAction.OBJECTS),
        (PurgeFacts(ID, True, upload_state="uploading"), PurgeAction.NOTHING),
        (PurgeFacts(ID, True, upload_state="complete", scan_status="pending"), PurgeAction.NOTHING),
        (PurgeFacts(ID, True, upload_state="complete", scan_status="clean"), PurgeAction.NOTHING),
        (PurgeFacts(ID, True, upload_state="complete", scan_status="skipped"), PurgeAction.NOTHING),
    ],
)
def test_plan(facts, action):
    assert plan_purge(facts) is action


def test_parts_exist_until_a_session_completes():
    assert has_parts(PurgeFacts(ID, True, session_state="open"))
    assert has_parts(PurgeFacts(ID, True, session_state="aborted"))
    assert has_parts(PurgeFacts(ID, True, session_state="expired"))
    assert not has_parts(PurgeFacts(ID, True, session_state="completed"))
    assert not has_parts(PurgeFacts(ID, True))


@pytest.mark.parametrize("state", ["open", "aborted", "expired", "completed"])
def test_a_tus_upload_has_its_tail_key_in_every_state(state):
    # issue 25: the bytes past the last whole part wait under uploads/<id>/tail; a completion removes it, and
    # a tail it could not remove goes with the file, so the purge names it whatever the session's state.
    facts = PurgeFacts(ID, True, session_state=state, protocol="tus")
    assert tail_keys_of(facts) == [tail_key(ID)] == [f"uploads/{ID}/tail"]


def test_a_native_upload_never_has_a_tail():
    assert tail_keys_of(PurgeFacts(ID, True, session_state="open", protocol="native")) == []
    assert tail_keys_of(PurgeFacts(ID, True)) == []


def test_keys_of_a_file():
    keys = object_keys_of(ID, original_key(ID, 2))
    assert keys == [
        original_key(ID, 1),
        original_key(ID, 2),
        original_key(ID, 3),
        variant_key(ID, "thumb-small"),
        variant_key(ID, "thumb-large"),
        variant_key(ID, "preview"),
        variant_key(ID, "poster"),
    ]


@given(st.uuids(), st.integers(min_value=1, max_value=50))
def test_every_key_validates_and_carries_only_its_file_id(file_id, revision):
    keys = object_keys_of(file_id, original_key(file_id, revision))
    assert len(keys) == revision + 1 + 4
    for key in keys:
        validate_key(key)
        ids = [segment for segment in key.split("/") if len(segment) == 36]
        assert ids == [str(file_id)]


@given(st.uuids(), st.uuids())
def test_another_files_key_is_refused(file_id, other):
    if file_id == other:
        return
    with pytest.raises(KeySchemaError):
        object_keys_of(file_id, original_key(other, 1))


@pytest.mark.parametrize(
    "stored",
    [
        variant_key(ID, "preview"),
        part_key(ID, 1),
        "f/00/00/" + str(ID) + "/orig-1",
        original_key(ID) + "/x",
        "f/6f/1c/" + str(ID) + "/orig-0",
        "../" + original_key(ID),
        "",
        "f/6f/1c/" + str(ID) + "/orig-a",
    ],
)
def test_malformed_or_foreign_stored_keys_are_refused(stored):
    with pytest.raises(KeySchemaError):
        object_keys_of(ID, stored)


@given(st.uuids(), st.integers(min_value=1, max_value=50), st.integers(min_value=1, max_value=10_000))
def test_every_key_of_a_file_parses_back_to_it_and_its_kind(file_id, revision, part):
    objects = FileObjects(file_id, original_key(file_id, revision), tail=True)
    kinds = [kind for kind in (parse(key) for key in objects.object_keys()) if kind is not None]
    assert len(kinds) == len(objects.object_keys())
    assert {kind for _, kind in kinds} == {"original", "variant", "tail"}
    assert {owner for owner, _ in kinds} == {file_id}
    assert parse(part_key(file_id, part)) == (file_id, "part")


@pytest.mark.parametrize(
    "key",
    [
        "f/00/00/" + str(ID) + "/orig-1",
        "f/zz/garbage",
        "issues/x",
        "uploads/not-a-uuid/part-1",
        "uploads/" + str(ID).upper() + "/tail",
        "f/6f/1c/" + str(ID),
        "",
    ],
)
def test_keys_outside_the_schema_have_no_owner(key):
    assert owner_of(key) is None
