"""Lifecycle webhooks: an application hears of a file's state without polling. `file.ready` when it is
deliverable, `file.blocked` when the real clamd finds it infected, `file.failed` with a reason word (aborted,
expired, a completion's mismatch, the scan's error), `file.variants_ready` with the variants' names; each
signed as Standard Webhooks and verified with its library (a verifier no one here wrote), written in the
transaction that changed the file (a rolled-back change sends nothing), sent only to endpoints that take the
type, and never carrying a name, key, digest or uploader."""

from __future__ import annotations

import base64
import json
import os
import uuid
from datetime import timedelta
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from app.db.events import announce_settled
from app.domain.ends import FilesSettled
from app.domain.webhooks import EVENTS, FAILED_REASONS, SETTLED, scan_settled
from app.lifecycle.cleanup import run_cleanup
from tests.support import images
from tests.support.clamd import EICAR
from tests.support.helpers import rows
from tests.support.lethe import ALEX, sha256
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.one_store  # the store plays no part in what is sent
CANARY = "Canary-Lifecycle-payroll"
KEY = "whsec_" + base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
def hooks():
    receiver = Receiver(default=204, trickle_s=0.3)
    yield receiver
    receiver.close()


def lethe_hearing(make_lethe, hooks, events=SETTLED, **settings):
    endpoint = [{"name": "app", "url": hooks.url, "secret": KEY, "events": list(events)}]
    return make_lethe(**{"webhooks.endpoints": json.dumps(endpoint), **settings})


def messages(lethe, hooks) -> list[dict[str, Any]]:
    """Every message delivered so far, each verified with the Standard Webhooks library."""
    lethe.run_jobs()
    return [Webhook(KEY).verify(got.body, got.headers) for got in hooks.received]


def name_free(lethe, hooks, file_id: str) -> None:
    row = lethe.row(file_id)
    for got in hooks.received:
        body = got.body.decode()
        assert CANARY not in body and str(ALEX.id) not in body
        if row is not None and row.sha256:
            assert row.sha256 not in body
        if row is not None and row.object_key:
            assert row.object_key not in body


def test_every_lifecycle_type_is_one_an_endpoint_may_take_and_each_outcome_has_its_event():
    assert set(SETTLED) <= set(EVENTS) and len(set(EVENTS)) == len(EVENTS)
    assert scan_settled("clean") == ("file.ready", None) and scan_settled("skipped") == ("file.ready", None)
    assert scan_settled("infected") == ("file.blocked", "infected")
    assert scan_settled("error") == ("file.failed", "scan_error")
    assert scan_settled("failed") == ("file.failed", "checksum_mismatch")
    assert scan_settled("pending") is None
    assert {"aborted", "expired", "scan_error", "checksum_mismatch"} <= set(FAILED_REASONS)


def test_a_scanned_file_is_ready_and_an_infected_one_blocked(make_lethe, hooks, real_clamd):
    lethe = lethe_hearing(make_lethe, hooks, **{"scan.clamd_address": real_clamd.address})
    clean = lethe.upload(ALEX, b"hello lethe", name=f"{CANARY}.txt")
    infected = lethe.upload(ALEX, EICAR, name=f"{CANARY}.com")
    got = {m["data"]["file_id"]: m for m in messages(lethe, hooks)}
    assert got[clean]["type"] == "file.ready"
    assert got[clean]["data"] == {"file_id": clean, "purpose": "attachment", "size_bytes": len(b"hello lethe")}
    assert got[infected]["type"] == "file.blocked"
    assert got[infected]["data"] == {
        "file_id": infected,
        "purpose": "attachment",
        "size_bytes": len(EICAR),
        "reason": "infected",
    }
    assert len(hooks.received) == 2  # one message each: a completion alone sends nothing
    name_free(lethe, hooks, clean)


def test_failures_say_why_in_one_word(make_lethe, hooks):
    lethe = lethe_hearing(make_lethe, hooks)
    # aborted by its uploader
    aborted = lethe.start_upload(ALEX, b"x" * 10, name=f"{CANARY}-a.txt")["file"]["id"]
    assert lethe.call("DELETE", f"/api/v1/uploads/{aborted}", ALEX).status_code == 204
    # a completion that finds other bytes than declared
    data = b"declared digest"
    created = lethe.start_upload(ALEX, data, name=f"{CANARY}-m.txt", sha256=sha256(b"other bytes"))
    mismatched = created["file"]["id"]
    lethe.send_parts(ALEX, mismatched, data, created["upload"]["part_size"])
    assert lethe.call("POST", f"/api/v1/uploads/{mismatched}/complete", ALEX).status_code == 409
    expired = lethe.start_upload(ALEX, b"y" * 10, name=f"{CANARY}-e.txt")["file"]["id"]
    sent = messages(lethe, hooks)
    # expired: the session outlives its TTL and the cleanup's step a ends it
    lethe.clock.advance(timedelta(days=30))
    run_cleanup(lethe.rt)
    sent += messages(lethe, hooks)[len(sent) :]
    got = {m["data"]["file_id"]: m for m in sent if m["type"] == "file.failed"}
    assert len(got) == len(sent) == 3
    assert got[aborted]["data"]["reason"] == "aborted"
    assert got[mismatched]["data"]["reason"] == "checksum_mismatch"
    assert got[expired]["data"]["reason"] == "expired"
    assert all(set(m["data"]) == {"file_id", "purpose", "size_bytes", "reason"} for m in got.values())
    for file_id in (aborted, mismatched, expired):
        name_free(lethe, hooks, file_id)


def test_an_image_is_ready_then_its_variants_ready_with_their_names(make_lethe, hooks):
    lethe = lethe_hearing(make_lethe, hooks)
    file_id = lethe.upload(ALEX, images.photo(), name=f"{CANARY}.jpg", mime_type="image/jpeg")
    lethe.run_jobs("make_variants")
    sent = [m for m in messages(lethe, hooks) if m["data"]["file_id"] == file_id]
    assert [m["type"] for m in sent] == ["file.ready", "file.variants_ready"]
    assert (
        sent[1]["data"]["variants"] == sorted(sent[1]["data"]["variants"]) and "preview" in sent[1]["data"]["variants"]
    )
    document = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json
    assert set(sent[1]["data"]["variants"]) == {thumb["name"] for thumb in document["thumbnails"]}
    name_free(lethe, hooks, file_id)


def test_only_the_types_an_endpoint_takes_reach_it_and_a_rolled_back_change_sends_nothing(make_lethe, hooks):
    lethe = lethe_hearing(make_lethe, hooks, events=("file.failed",))
    lethe.upload(ALEX, b"ready but not wanted")
    assert messages(lethe, hooks) == [] and rows(lethe, "webhook_deliveries") == []

    aborted = lethe.start_upload(ALEX, b"z" * 10)["file"]["id"]

    def fail_then_roll_back(uow):
        announce_settled(uow, FilesSettled("file.failed", (uuid.UUID(aborted),), lethe.clock.now(), "aborted"))
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        lethe.rt.db.unit_of_work(fail_then_roll_back, name="test.rollback")
    assert rows(lethe, "webhook_deliveries") == [] and messages(lethe, hooks) == []
