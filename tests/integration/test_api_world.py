"""Scan, events, files, messages and drafts through the HTTP API, for both drivers (D3, D11, D13)."""

from __future__ import annotations

import uuid

import pytest

from app.api.schemas import FileSchema
from app.db.conn import one
from app.domain.file_events import file_document
from tests.support.helpers import problem
from tests.support.lethe import ALEX, OWNER, ROBIN, SAM, Person

# The HTTP contract is the store's no matter which: fs alone, but for what reads the bytes through the store.
pytestmark = pytest.mark.one_store


# -- scan ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, outcome", [("ok", "clean"), ("eicar", "infected"), ("garbage", "error")])
@pytest.mark.every_store
def test_scan_outcomes_from_clamd(make_lethe, clamd, mode, outcome):
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    clamd.mode = mode
    data = b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$EICAR" if mode == "eicar" else b"harmless"
    file_id = lethe.upload(ALEX, data)
    assert clamd.received[-1] == data  # the whole original was streamed
    row = lethe.row(file_id)
    assert row.scan_status == outcome and row.scanned_at == lethe.clock.now()
    content = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert content.status_code == (200 if outcome == "clean" else 404)


def test_without_clamd_the_scan_is_skipped(lethe):
    file_id = lethe.upload(ALEX)
    assert lethe.row(file_id).scan_status == "skipped"


def test_a_scan_job_runs_once_in_effect(lethe):
    file_id = lethe.upload(ALEX, scan=False)
    from workers.actors import ACTORS

    for _ in range(2):  # at-least-once delivery: a second copy changes nothing
        ACTORS["scan_file"].fn(lethe.rt, file_id)
    events = lethe.call("GET", "/api/v1/events", ALEX).json["events"]
    assert [e["payload"]["file"]["scan_status"] for e in events] == ["pending", "skipped"]


def test_a_scan_job_for_a_missing_row_ends_quietly(lethe):
    from workers.actors import ACTORS

    assert ACTORS["scan_file"].fn(lethe.rt, str(uuid.uuid4())) is None


def test_a_scan_that_cannot_reach_clamd_raises_so_the_job_retries(make_lethe):
    from app.content.clamd import ClamdUnavailable
    from tests.support.ports import free_port
    from workers.actors import ACTORS

    lethe = make_lethe(**{"scan.clamd_address": f"127.0.0.1:{free_port()}", "scan.timeout": "2s"})
    file_id = lethe.upload(ALEX, scan=False)
    with pytest.raises(ClamdUnavailable):
        ACTORS["scan_file"].fn(lethe.rt, file_id)
    assert lethe.row(file_id).scan_status == "pending"


# -- events --------------------------------------------------------------------------------------------------


def test_events_in_order_to_the_uploader_with_a_cursor(lethe):
    first = lethe.upload(ALEX, name="one.txt")
    lethe.upload(SAM, name="sams.txt")
    second = lethe.upload(ALEX, name="two.txt")
    page = lethe.call("GET", "/api/v1/events?limit=3", ALEX).json
    assert [
        (e["resource_id"], e["payload"]["file"]["upload_state"], e["payload"]["file"]["scan_status"])
        for e in page["events"]
    ] == [(first, "complete", "pending"), (first, "complete", "skipped"), (second, "complete", "pending")]
    assert all(
        e["type"] == "file.updated" and e["schema_version"] == 1 and e["redacted"] is False for e in page["events"]
    )
    assert page["events"][0]["actor_id"] == str(ALEX.id)  # the completion was Alex's
    assert "actor_id" not in page["events"][1]  # the scan job writes no actor
    rest = lethe.call("GET", f"/api/v1/events?after={page['next_after']}", ALEX).json
    assert [e["resource_id"] for e in rest["events"]] == [second]
    ids = [e["id"] for e in page["events"] + rest["events"]]
    assert ids == sorted(ids)
    empty = lethe.call("GET", f"/api/v1/events?after={rest['next_after']}", ALEX).json
    assert empty == {"events": [], "next_after": rest["next_after"]}
    sams = lethe.call("GET", "/api/v1/events", SAM).json["events"]
    assert {e["resource_id"] for e in sams} != {first, second} and len(sams) == 2


def test_event_payloads_are_files_without_nulls(lethe):
    file_id = lethe.upload(ALEX, scope_id=str(uuid.uuid4()))
    for event in lethe.call("GET", "/api/v1/events", ALEX).json["events"]:
        document = event["payload"]["file"]
        FileSchema().load(document)
        assert None not in document.values()
    assert file_document(lethe.row(file_id)) == FileSchema().dump(lethe.row(file_id))


@pytest.mark.parametrize("query", ["after=-1", "limit=0", "limit=1001", "after=x"])
def test_bad_event_queries_are_422(lethe, query):
    problem(lethe.call("GET", f"/api/v1/events?{query}", ALEX), 422, "invalid_request")


def test_an_abort_writes_one_event(lethe):
    file_id = lethe.start_upload(ALEX, b"abc")["file"]["id"]
    lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX)
    events = lethe.call("GET", "/api/v1/events", ALEX).json["events"]
    assert [e["payload"]["file"]["upload_state"] for e in events] == ["failed"]


# -- files ---------------------------------------------------------------------------------------------------


def test_a_file_is_visible_to_its_uploader_and_to_manage_only(lethe):
    file_id = lethe.upload(ALEX, name="private.txt")
    assert lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json["original_name"] == "private.txt"
    assert lethe.call("GET", f"/api/v1/files/{file_id}", OWNER).status_code == 200
    foreign = lethe.call("GET", f"/api/v1/files/{file_id}", SAM)
    unknown = lethe.call("GET", f"/api/v1/files/{uuid.uuid4()}", SAM)
    problem(foreign, 404, "not_found")
    assert foreign.get_data() == unknown.get_data()
    problem(lethe.call("GET", f"/api/v1/files/{file_id}/content", SAM), 404, "not_found")


def test_reading_needs_files_read(lethe):
    file_id = lethe.upload(ALEX)
    writer_only = Person("Alex", "alex@example.com", ("files:write",))
    problem(lethe.call("GET", f"/api/v1/files/{file_id}", writer_only), 403, "forbidden")
    # Issue 9 finding 5: the upload view carries the name and digest too, so it needs files:read as well.
    body = problem(lethe.call("GET", f"/api/v1/uploads/{file_id}", writer_only), 403, "forbidden")
    assert "file" not in body
    problem(
        lethe.call("GET", f"/api/v1/uploads/{file_id}", Person("Sam", "sam@example.com", ("files:write",))),
        404,
        "not_found",
    )  # not visible: 404 first, as everywhere


def test_content_of_a_file_not_deliverable_is_404(lethe):
    file_id = lethe.upload(ALEX, scan=False)  # scan pending
    problem(lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX), 404, "not_found")
    uploading = lethe.start_upload(ALEX, b"abc")["file"]["id"]
    problem(lethe.call("GET", f"/api/v1/files/{uploading}/content", ALEX), 404, "not_found")


@pytest.mark.every_store
def test_content_whose_object_is_gone_is_410_not_500(lethe):
    file_id = lethe.upload(ALEX)
    lethe.store.delete(lethe.row(file_id).object_key)
    body = problem(lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX), 410, "gone", "content_missing")
    assert "f/" not in str(body)
    problem(lethe.call("GET", f"/api/v1/files/{file_id}/content", SAM), 404, "not_found")


# -- messages ------------------------------------------------------------------------------------------------


def test_attach_files_to_a_message(lethe):
    one, two = lethe.upload(ALEX), lethe.upload(ALEX)
    response = lethe.call("PUT", "/api/v1/messages/msg-1", ALEX, json={"file_ids": [one]})
    assert response.status_code == 200
    assert response.json["author_id"] == str(ALEX.id) and response.json["file_ids"] == [one]
    # Again with one more: idempotent for what is attached, adds the rest.
    response = lethe.call("PUT", "/api/v1/messages/msg-1", ALEX, json={"file_ids": [one, two]})
    assert sorted(response.json["file_ids"]) == sorted([one, two])


@pytest.mark.parametrize("case", ["foreign", "pending", "failed", "unknown", "attached_elsewhere", "avatar"])
def test_attach_rules_answer_409_and_attach_nothing(lethe, case):
    good = lethe.upload(ALEX)
    if case == "foreign":
        bad = lethe.upload(SAM)
    elif case == "pending":
        bad = lethe.upload(ALEX, scan=False)
    elif case == "failed":
        bad = lethe.start_upload(ALEX, b"abc")["file"]["id"]
        lethe.call("DELETE", f"/api/v1/uploads/{bad}", ALEX)
    elif case == "unknown":
        bad = str(uuid.uuid4())
    elif case == "avatar":
        bad = lethe.upload(ALEX, purpose="avatar")
    else:
        bad = lethe.upload(ALEX)
        assert lethe.call("PUT", "/api/v1/messages/other", ALEX, json={"file_ids": [bad]}).status_code == 200
    response = lethe.call("PUT", "/api/v1/messages/msg-2", ALEX, json={"file_ids": [good, bad]})
    problem(response, 409, "conflict", "file_not_attachable")
    attached = lethe.rt.db.read(
        lambda conn: one(conn.execute("SELECT count(*) AS n FROM attachments WHERE message_id = 'msg-2'")).n
    )
    assert attached == 0


def test_message_ids_are_scoped_by_author(lethe):
    """Issue 9 finding 5: Sam using Alex's message id makes Sam's own message; Alex's is untouched, and
    nothing Sam sees tells whether Alex's exists."""
    alexs, sams = lethe.upload(ALEX), lethe.upload(SAM)
    assert lethe.call("PUT", "/api/v1/messages/alex-msg", ALEX, json={"file_ids": [alexs]}).status_code == 200
    claimed = lethe.call("PUT", "/api/v1/messages/alex-msg", SAM, json={"file_ids": [sams]})
    never_used = lethe.call("PUT", "/api/v1/messages/fresh-msg", SAM, json={"file_ids": []})
    assert (claimed.status_code, never_used.status_code) == (200, 200)
    assert claimed.json["author_id"] == str(SAM.id) and claimed.json["file_ids"] == [sams]
    # Alex still owns and uses the id; Sam deleting "alex-msg" deletes Sam's message only.
    again = lethe.call("PUT", "/api/v1/messages/alex-msg", ALEX, json={"file_ids": []})
    assert again.status_code == 200 and again.json["file_ids"] == [alexs]
    assert lethe.call("DELETE", "/api/v1/messages/alex-msg", SAM).status_code == 204
    assert lethe.row(sams).deleted_at is not None and lethe.row(alexs).deleted_at is None
    # A probe of another author's id is the same 404 as an unknown id.
    unknown = lethe.call("DELETE", "/api/v1/messages/nobody-msg", SAM)
    foreign = lethe.call("DELETE", f"/api/v1/messages/alex-msg?author_id={ALEX.id}", SAM)
    assert (unknown.status_code, unknown.get_data()) == (foreign.status_code, foreign.get_data())
    assert foreign.status_code == 404 and lethe.row(alexs).deleted_at is None


def test_at_most_max_attachments(make_lethe):
    lethe = make_lethe(**{"file.max_attachments": 2})
    ids = [lethe.upload(ALEX) for _ in range(3)]
    problem(
        lethe.call("PUT", "/api/v1/messages/m", ALEX, json={"file_ids": ids}),
        422,
        "invalid_request",
        "too_many_attachments",
    )


@pytest.mark.parametrize("message_id", ["has space", "x" * 129, "semi;colon"])
def test_bad_message_ids_are_422(lethe, message_id):
    problem(
        lethe.call("PUT", f"/api/v1/messages/{message_id}", ALEX, json={"file_ids": []}),
        422,
        "invalid_request",
        "invalid_message_id",
    )


def test_bad_message_bodies_are_422(lethe):
    for body in ({"file_ids": ["nope"]}, {"file_ids": "x"}, {}, {"file_ids": [], "extra": 1}):
        problem(lethe.call("PUT", "/api/v1/messages/m", ALEX, json=body), 422, "invalid_request")


# -- drafts --------------------------------------------------------------------------------------------------


def test_drafts_may_name_any_id_even_a_foreign_one(lethe):
    sams = lethe.upload(SAM)
    made_up = str(uuid.uuid4())
    response = lethe.call(
        "PUT", "/api/v1/drafts/channel:general", ROBIN, json={"text": "see attached", "file_ids": [sams, made_up]}
    )
    assert response.status_code == 200
    assert response.json["file_ids"] == [sams, made_up] and response.json["key"] == "channel:general"
    listed = lethe.call("GET", "/api/v1/drafts", ROBIN).json["drafts"]
    assert [d["key"] for d in listed] == ["channel:general"]
    assert lethe.call("GET", "/api/v1/drafts", ALEX).json["drafts"] == []
    assert lethe.call("DELETE", "/api/v1/drafts/channel:general", ROBIN).status_code == 204
    assert lethe.call("DELETE", "/api/v1/drafts/channel:general", ROBIN).status_code == 204
    assert lethe.call("GET", "/api/v1/drafts", ROBIN).json["drafts"] == []


def test_draft_keys_and_bodies_are_checked_in_form(lethe):
    problem(
        lethe.call("PUT", "/api/v1/drafts/bad%20key", ALEX, json={"text": ""}),
        422,
        "invalid_request",
        "invalid_draft_key",
    )
    problem(lethe.call("PUT", "/api/v1/drafts/k", ALEX, json={"file_ids": ["not-a-uuid"]}), 422, "invalid_request")
    problem(lethe.call("PUT", "/api/v1/drafts/k", ALEX, json={"text": 5}), 422, "invalid_request")
    too_many = [str(uuid.uuid4()) for _ in range(11)]
    problem(
        lethe.call("PUT", "/api/v1/drafts/k", ALEX, json={"file_ids": too_many}),
        422,
        "invalid_request",
        "too_many_attachments",
    )


def test_wrong_method_is_405_with_allow(lethe):
    response = lethe.call("PATCH", "/api/v1/drafts", ALEX)
    problem(response, 405, "method_not_allowed")
    assert "GET" in response.headers["Allow"]
