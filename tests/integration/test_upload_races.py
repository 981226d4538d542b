"""Completes, aborts and part uploads at once (issue 9 finding 3): no interleaving ever deletes an object that
a committed row references, and a repeated complete answers the same file. Both drivers (and a versioned
bucket, whose teardown proves nothing was left behind)."""

from __future__ import annotations

import os
import random
import threading

from tests.conftest import versions_of
from tests.support.helpers import keys_of, problem
from tests.support.faults import PausingStore
from tests.support.lethe import ALEX

ROUNDS = 12


def started_upload(lethe, data: bytes) -> str:
    """An upload with every part sent, ready to complete."""
    created = lethe.start_upload(ALEX, data)
    file_id = created["file"]["id"]
    lethe.send_parts(ALEX, file_id, data, created["upload"]["part_size"])
    return file_id


def test_a_completion_holds_its_upload_and_a_retry_gets_the_same_file(lethe):
    # Given an upload whose completion is paused inside the store call
    data = os.urandom(lethe.part_size + 7)
    file_id = started_upload(lethe, data)
    real = lethe.rt.store
    paused = PausingStore(real, "complete_upload")
    lethe.rt.store = paused
    answers = {}
    first = threading.Thread(target=lambda: answers.setdefault(
        "first", lethe.app.test_client().post(f"/api/v1/uploads/{file_id}/complete", headers=ALEX.headers)))
    first.start()
    assert paused.entered.wait(10)
    # When a second complete, an abort and a part arrive meanwhile, each is refused with 409
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 409, "conflict", "upload_completing")
    problem(lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX), 409, "conflict", "upload_completing")
    problem(lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[:lethe.part_size]),
            409, "conflict", "upload_completing")
    paused.release()
    first.join(10)
    lethe.rt.store = real
    # Then the first completes, and a client retrying after a timeout gets the same file with 200
    assert answers["first"].status_code == 200, answers["first"].get_data(as_text=True)
    again = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    assert again.status_code == 200 and again.json == answers["first"].json
    lethe.run_jobs("scan_file")
    assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == data


def test_a_stale_claim_is_taken_over(lethe):
    """A completion whose process died leaves a claim; after file.complete_timeout another complete may
    take the upload over."""
    data = b"stale claim"
    file_id = started_upload(lethe, data)
    lethe.rt.db.unit_of_work(lambda uow: uow.execute(
        "UPDATE upload_sessions SET completing_since = %s WHERE file_id = %s", (lethe.clock.now(), file_id)),
        name="test.claim")
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 409, "conflict", "upload_completing")
    lethe.clock.advance(lethe.cfg.file.complete_timeout)
    assert lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX).status_code == 200


def test_completes_aborts_and_parts_at_once_never_lose_a_referenced_object(lethe):
    rng = random.Random(9)
    allowed = {200, 204, 409, 410}
    for round_number in range(ROUNDS):
        data = os.urandom(lethe.part_size + rng.randint(1, 50))
        file_id = started_upload(lethe, data)
        actions = ["complete", "complete", rng.choice(["complete", "abort", "part", "part"])]
        rng.shuffle(actions)
        barrier = threading.Barrier(len(actions))
        statuses: list[tuple[str, int]] = []

        def act(action: str) -> None:
            client = lethe.app.test_client()
            barrier.wait(10)
            if action == "complete":
                response = client.post(f"/api/v1/uploads/{file_id}/complete", headers=ALEX.headers)
            elif action == "abort":
                response = client.delete(f"/api/v1/uploads/{file_id}", headers=ALEX.headers)
            else:
                response = client.put(f"/api/v1/uploads/{file_id}/parts/1", headers=ALEX.headers,
                                      data=data[:lethe.part_size])
            statuses.append((action, response.status_code))

        threads = [threading.Thread(target=act, args=(action,)) for action in actions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert all(status in allowed for _, status in statuses), (round_number, statuses)
        lethe.run_jobs()
        state = lethe.row(file_id).upload_state
        if state == "complete":
            # Whatever happened, the original the row references is there, whole.
            assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == data, (round_number, statuses)
            retry = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
            assert retry.status_code == 200 and retry.json["id"] == file_id
        else:
            # An aborted upload keeps nothing: no original, no part.
            assert state == "failed", (round_number, statuses)
            assert ("abort", 204) in statuses
            assert versions_of(lethe.raw_store, keys_of(file_id)) == []
