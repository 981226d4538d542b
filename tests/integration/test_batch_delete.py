"""batchDeleteFiles (issue 24): each id answered exactly as deleteFile would answer it alone, one transaction,
rows locked in id order (D10), one purge job for the batch; on both drivers."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.support.helpers import attach_while_a_request_waits, keys_of, problem, rows
from tests.support.lethe import ALEX, OWNER, SAM, Person

URL = "/api/v1/files/batch-delete"
READER = Person("Alex", "alex@example.com", ("files:read",))


def batch(lethe, person, ids):
    return lethe.call("POST", URL, person, json={"ids": [str(i) for i in ids]})


def alone(lethe, person, file_id):
    """What deleteFile answers for the id alone: status and reason."""
    response = lethe.call("DELETE", f"/api/v1/files/{file_id}", person)
    return response.status_code, (response.get_json(silent=True) or {}).get("reason")


def test_every_answer_of_deletefile_in_request_order(lethe):
    # Given: every kind of id deleteFile answers differently
    own = lethe.upload(ALEX)
    attached = lethe.upload(ALEX)
    assert lethe.call("PUT", "/api/v1/messages/m1", ALEX, json={"file_ids": [attached]}).status_code == 200
    avatar = lethe.upload(ALEX, purpose="avatar")
    foreign = lethe.upload(SAM)
    unknown = uuid.uuid4()
    purged = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{purged}", ALEX)
    lethe.run_jobs("purge_objects")
    assert lethe.row(purged) is None
    deleted_before = lethe.upload(ALEX)  # deleted, not purged yet
    assert lethe.call("DELETE", f"/api/v1/files/{deleted_before}", ALEX).status_code == 204
    ids = [avatar, unknown, own, foreign, attached, deleted_before, purged]

    # When
    response = batch(lethe, ALEX, ids)

    # Then: one result per id, in request order, each as deleteFile answers it
    assert response.status_code == 200
    results = response.json["results"]
    assert [r["id"] for r in results] == [str(i) for i in ids]
    by_id = {r["id"]: (r["status"], r.get("reason")) for r in results}
    assert by_id == {
        str(avatar): (409, "purpose_not_deletable"),
        str(unknown): (404, "not_found"),
        str(own): (204, None),
        str(foreign): (404, "not_found"),
        str(attached): (409, "file_attached"),
        str(deleted_before): (404, "not_found"),
        str(purged): (404, "not_found"),  # deleted is deleted, row or not
    }
    # and deleteFile alone agrees for every one of them now (own is deleted now: 404 like any deleted file)
    for file_id in ids:
        status, reason = (404, "not_found") if file_id == own else by_id[str(file_id)]
        assert alone(lethe, ALEX, file_id) == (status, reason if status == 409 else None)
    assert lethe.row(own).deleted_at is not None
    assert lethe.row(attached).deleted_at is None and lethe.row(avatar).deleted_at is None
    assert lethe.row(foreign).deleted_at is None


def test_one_transaction_one_purge_job_and_every_object_goes(lethe):
    ids = [uuid.UUID(lethe.upload(ALEX, f"file {n}".encode(), name=f"secret-{n}.txt")) for n in range(12)]
    lethe.broker.take()
    response = batch(lethe, ALEX, ids)
    assert response.status_code == 200 and {r["status"] for r in response.json["results"]} == {204}
    jobs = lethe.broker.take("purge_objects")
    assert len(jobs) == 1 and sorted(jobs[0].args[0]) == sorted(str(i) for i in ids)
    # the stored events of every file are redacted with the mark
    stored = [e for e in rows(lethe, "events") if e.resource_kind == "file"]
    assert stored and all(e.redacted_at is not None and "secret-" not in str(e.payload) for e in stored)
    from workers.actors import ACTORS

    ACTORS["purge_objects"].fn(lethe.rt, *jobs[0].args)
    for file_id in ids:
        assert lethe.row(file_id) is None
        assert all(lethe.store.head(key) is None for key in keys_of(str(file_id)))


def test_duplicates_are_answered_each_and_counted_once(lethe):
    own = lethe.upload(ALEX)
    lethe.broker.take()
    response = batch(lethe, ALEX, [own, own])
    assert [r["status"] for r in response.json["results"]] == [204, 204]
    assert len(lethe.broker.take("purge_objects")) == 1


def test_a_manager_deletes_anyones_file_as_deletefile_lets_them(lethe):
    foreign = lethe.upload(SAM)
    response = batch(lethe, OWNER, [foreign])
    assert response.json["results"] == [{"id": foreign, "status": 204}]
    # deleted now: to the manager it looks like a purged id, as deleteFile answers (D12)
    assert batch(lethe, OWNER, [foreign]).json["results"][0]["status"] == 404
    assert alone(lethe, OWNER, foreign) == (404, None)


@pytest.mark.parametrize(
    "body",
    [
        {"ids": []},
        {"ids": [str(uuid.uuid4()) for _ in range(1001)]},
        {"ids": ["not-a-uuid"]},
        {},
        {"ids": "x"},
        {"ids": [str(uuid.uuid4())], "more": 1},
    ],
)
def test_bad_bodies_are_422(lethe, body):
    response = lethe.call("POST", URL, ALEX, json=body)
    assert response.status_code == 422 and response.mimetype == "application/problem+json"


def test_a_thousand_ids_are_taken(lethe):
    response = batch(lethe, ALEX, [uuid.uuid4() for _ in range(1000)])
    assert response.status_code == 200 and len(response.json["results"]) == 1000


def test_scopes_and_credentials(lethe):
    own = lethe.upload(ALEX)
    assert lethe.call("POST", URL, json={"ids": [own]}).status_code == 401
    refused = batch(lethe, READER, [own])
    assert refused.status_code == 403 and problem(refused, 403, "forbidden")
    assert lethe.row(own).deleted_at is None


def test_a_batch_that_waits_for_an_attach_sees_it_and_answers_409(lethe):
    """Forced order: the attach holds one file's row and commits its attachment while the batch waits for
    that row; the batch then sees the attachment (D10) and deletes only the other file."""
    held, free = sorted([lethe.upload(ALEX), lethe.upload(ALEX)])
    answer = attach_while_a_request_waits(
        lethe, ALEX, held, lambda client: client.post(URL, headers=ALEX.headers, json={"ids": [free, held]})
    )
    assert answer["results"] == [{"id": free, "status": 204}, {"id": held, "status": 409, "reason": "file_attached"}]
    assert lethe.row(held).deleted_at is None and lethe.row(free).deleted_at is not None


@pytest.mark.one_store  # a database lock race: the store plays no part
def test_batch_and_attach_at_once_end_attached_or_deleted_never_both(lethe):
    for round_ in range(10):
        file_ids = sorted(lethe.upload(ALEX) for _ in range(3))
        barrier = threading.Barrier(2)
        answers = {}

        def delete():
            barrier.wait()
            answers["delete"] = batch(lethe, ALEX, file_ids).json["results"]

        def attach():
            barrier.wait()
            answers["attach"] = lethe.call(
                "PUT", f"/api/v1/messages/race-{round_}", ALEX, json={"file_ids": [file_ids[1]]}
            ).status_code

        threads = [threading.Thread(target=delete), threading.Thread(target=attach)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        attached = bool(rows(lethe, "attachments", file_id=file_ids[1]))
        row = lethe.row(file_ids[1])
        assert not (attached and row.deleted_at is not None)
        middle = answers["delete"][1]
        if attached:
            assert answers["attach"] == 200 and (middle["status"], middle.get("reason")) == (409, "file_attached")
        else:
            assert answers["attach"] == 409 and middle["status"] == 204 and row.deleted_at is not None
        assert all(lethe.row(i).deleted_at is not None for i in (file_ids[0], file_ids[2]))
