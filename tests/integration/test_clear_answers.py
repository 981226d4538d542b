"""Clear answers to a new user's careless requests (issue 21)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.lifecycle.cleanup import run_cleanup
from tests.support.helpers import problem, rows
from tests.support.lethe import ALEX, SAM

FS_ONLY = pytest.mark.parametrize("raw_store", ["fs"], indirect=True)


@FS_ONLY
def test_a_deleted_message_id_answers_409_until_its_tombstone_goes(make_lethe):
    lethe = make_lethe(**{"privacy.message_tombstone_ttl": "30d"})
    file_id = lethe.upload(ALEX)
    assert lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [file_id]}).status_code == 200
    assert lethe.call("DELETE", "/api/v1/messages/m-1", ALEX).status_code == 204
    # Reusing the id says why (it was a bare 404 without a reason)
    again = lethe.upload(ALEX)
    problem(lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [again]}), 409, "conflict",
            "message_deleted")
    assert lethe.call("DELETE", "/api/v1/messages/m-1", ALEX).status_code == 204  # a repeated delete
    # Sam's own m-1 is another message (ids are scoped by author)
    assert lethe.call("PUT", "/api/v1/messages/m-1", SAM, json={"file_ids": []}).status_code == 200
    # The tombstone (author and id) is removed by the cleanup after privacy.message_tombstone_ttl
    lethe.clock.advance(timedelta(days=30) - timedelta(seconds=1))
    assert run_cleanup(lethe.rt).step("l").acted == 0
    lethe.clock.advance(timedelta(seconds=1))
    assert run_cleanup(lethe.rt, dry_run=True).step("l").acted == 1
    assert run_cleanup(lethe.rt).step("l").acted == 1
    assert [(row.author_id, row.id) for row in rows(lethe, "messages")] == [(SAM.id, "m-1")]
    problem(lethe.call("DELETE", "/api/v1/messages/m-1", ALEX), 404, "not_found")  # gone: treat 404 as done
    fresh = lethe.upload(ALEX)  # (`again`, never attached, went by step b meanwhile)
    assert lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [fresh]}).status_code == 200
