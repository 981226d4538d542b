"""The explainer: for a file in each state and under each rule, why it is still here and what ends it, from the
rules the code runs (the one rule for bytes, the cleanup's windows, retention); never a name."""

from __future__ import annotations

import json
import sys
import uuid
from datetime import timedelta
from typing import Any

import pytest

from app.lifecycle.explain import KEPT_BY, NOT_PER_FILE, STEP_RULES
from tests.support import images, zygote
from tests.support.lethe import ALEX, OWNER

pytestmark = pytest.mark.one_store
CANARY = "Canary-Explain-payslip"
RETENTION = json.dumps(
    [{"name": "chat-files", "purpose": "attachment", "max_age": "30d", "grace": "0s", "schedule": "0 3 * * *"}]
)


def explained(lethe, file_id, person=OWNER):
    answer = lethe.call("GET", f"/api/v1/files/{file_id}/explain", person)
    assert answer.status_code == 200, answer.json
    assert CANARY not in answer.get_data(as_text=True)
    return answer.json


def rules(doc) -> list[str]:
    return [reason["rule"] for reason in doc["kept_by"]]


def test_every_rule_of_the_code_has_an_explanation(lethe):
    from app.domain.ends import Keep
    from app.lifecycle.cleanup import run_cleanup

    assert set(KEPT_BY) == set(Keep)  # every reason the one rule keeps bytes for
    letters = {step.step for step in run_cleanup(lethe.rt, dry_run=True).steps}  # every step the cleanup runs
    assert len(letters) >= 18
    assert letters == set(STEP_RULES) | set(NOT_PER_FILE) and not set(STEP_RULES) & set(NOT_PER_FILE)


def test_a_live_file_never_attached_ends_by_the_cleanup_and_says_so(lethe, clock):
    file_id = lethe.upload(ALEX, b"notes", name=f"{CANARY}.txt")
    doc = explained(lethe, file_id)
    assert doc["state"] == "live" and doc["kept_by"] == [] and doc["the_one_rule"] == "live"
    assert doc["bytes_may_go"] is False and doc["store"] == "default"
    assert doc["ends"]["rule"] == "never_attached"
    row = lethe.file_row(file_id)
    assert doc["ends"]["at"] == (row.last_change_at + lethe.cfg.file.unattached_ttl).isoformat()
    assert lethe.call("GET", f"/api/v1/files/{file_id}/explain", ALEX).status_code == 403


def test_attached_in_a_draft_and_held(lethe):
    attached = lethe.upload(ALEX, b"one", name=f"{CANARY}-1.txt")
    assert lethe.call("PUT", "/api/v1/messages/m-7", ALEX, json={"file_ids": [attached]}).status_code == 200
    doc = explained(lethe, attached)
    assert doc["kept_by"] == [{"rule": "attached", "messages": ["m-7"]}] and doc["the_one_rule"] == "attached"
    assert doc["ends"] == {"rule": None, "at": None, "needs": "the deletion of the messages attaching it"}
    drafted = lethe.upload(ALEX, b"two", name=f"{CANARY}-2.txt")
    assert lethe.call("PUT", "/api/v1/drafts/d1", ALEX, json={"text": "", "file_ids": [drafted]}).status_code == 200
    doc = explained(lethe, drafted)
    assert rules(doc) == ["draft"] and doc["ends"]["rule"] == "draft" and doc["the_one_rule"] == "draft"
    held = lethe.upload(ALEX, b"three", name=f"{CANARY}-3.txt")
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-9", "file_id": held}).json
    assert lethe.call("DELETE", f"/api/v1/files/{held}", ALEX).status_code == 204
    lethe.run_jobs()
    doc = explained(lethe, held)
    assert doc["state"] == "deleted" and doc["the_one_rule"] == "hold" and doc["bytes_may_go"] is False
    assert doc["kept_by"] == [{"rule": "hold", "holds": [{"id": hold["id"], "case_ref": "CASE-9"}]}]
    assert doc["ends"] == {"rule": "hold", "at": None, "needs": "the release of its legal holds"}


def test_an_upload_under_way_a_pending_scan_and_pending_variants(lethe):
    data = b"x" * (lethe.part_size * 2)
    open_id = lethe.start_upload(ALEX, data, name=f"{CANARY}.bin")["file"]["id"]
    doc = explained(lethe, open_id)
    assert rules(doc) == ["upload_open"] and doc["ends"]["rule"] == "upload_open"
    assert doc["ends"]["at"] == doc["kept_by"][0]["until"]
    unscanned = lethe.upload(ALEX, b"later", name=f"{CANARY}.txt", scan=False)
    assert rules(explained(lethe, unscanned)) == ["scan_pending"]
    photo = lethe.upload(ALEX, images.photo(120, 80), name=f"{CANARY}.jpg", mime_type="image/jpeg")
    assert rules(explained(lethe, photo)) == ["variants_pending"]
    lethe.run_jobs("make_variants")
    assert rules(explained(lethe, photo)) == []


def test_deleted_then_refused_then_purged_then_unknown(lethe, clock):
    file_id = lethe.upload(ALEX, b"gone soon", name=f"{CANARY}.txt")
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    deleted_at = lethe.file_row(file_id).deleted_at
    doc = explained(lethe, file_id)
    until = (deleted_at + lethe.cfg.privacy.object_delete_delay).isoformat()
    assert doc["state"] == "deleted" and doc["kept_by"] == [{"rule": "delete_delay", "until": until}]
    assert doc["ends"] == {"rule": "purge", "at": until} and doc["bytes_may_go"] is True
    # The store refused its objects once: recorded as the purge records it.
    lethe.rt.db.unit_of_work(
        lambda uow: uow.conn.execute(
            "INSERT INTO purge_failures (file_id, attempts, error_code, failing_since, last_attempt_at, "
            "next_attempt_at) VALUES (%s, 1, 'AccessDenied', %s, %s, %s)",
            (file_id, deleted_at, deleted_at, deleted_at + timedelta(minutes=1)),
        ),
        name="test",
    )
    assert explained(lethe, file_id)["kept_by"][-1] == {
        "rule": "purge_failed",
        "store_answer": "AccessDenied",
        "next_attempt": (deleted_at + timedelta(minutes=1)).isoformat(),
    }
    lethe.run_jobs()
    doc = explained(lethe, file_id)
    assert doc["state"] == "purged" and doc["receipt"]["via"] == "file" and doc["ends"]["rule"] == "receipt_expires"
    unknown = explained(lethe, uuid.uuid4())
    assert unknown["state"] == "unknown" and unknown["kept_by"] == [] and unknown["ends"]["rule"] is None


def test_retention_ends_a_file_first_when_it_comes_first(make_lethe):
    lethe = make_lethe(**{"retention.policies": RETENTION, "file.unattached_ttl": "90d"})
    file_id = lethe.upload(ALEX, b"kept thirty days", name=f"{CANARY}.txt")
    doc = explained(lethe, file_id)
    row = lethe.file_row(file_id)
    assert doc["ends"] == {
        "rule": "retention",
        "at": (row.created_at + timedelta(days=30)).isoformat(),
        "policy": "chat-files",
    }


def test_lethe_explain_prints_it(lethe, database_url, tmp_path):
    file_id = lethe.upload(ALEX, b"cli", name=f"{CANARY}.txt")
    env = {"PATH": "/usr/bin:/bin", "LETHE_DATABASE_URL": database_url, "LETHE_FILE_FS_ROOT": str(tmp_path / "o")}
    shown = zygote.run(
        [sys.executable, "-m", "app.entry", "explain", file_id], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert f"file {file_id}: live" in shown.stdout and "ends by never_attached at" in shown.stdout
    as_json = zygote.run(
        [sys.executable, "-m", "app.entry", "explain", file_id, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(as_json.stdout)["ends"]["rule"] == "never_attached"
    assert CANARY not in shown.stdout + as_json.stdout + shown.stderr


def test_what_lethe_holds_of_a_person_by_rule(lethe, database_url, tmp_path):
    kept = lethe.upload(ALEX, b"attached", name=f"{CANARY}-a.txt")
    assert lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [kept]}).status_code == 200
    drafted = lethe.upload(ALEX, b"drafted", name=f"{CANARY}-d.txt")
    assert lethe.call("PUT", "/api/v1/drafts/d1", ALEX, json={"text": "", "file_ids": [drafted]}).status_code == 200
    deleted = lethe.upload(ALEX, b"deleted", name=f"{CANARY}-x.txt")
    assert lethe.call("DELETE", f"/api/v1/files/{deleted}", ALEX).status_code == 204  # its purge not run yet
    env = {"PATH": "/usr/bin:/bin", "LETHE_DATABASE_URL": database_url, "LETHE_FILE_FS_ROOT": str(tmp_path / "o")}

    def subject() -> dict[str, Any]:
        shown = zygote.run(
            [sys.executable, "-m", "app.entry", "explain", "--subject", str(ALEX.id), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert CANARY not in shown.stdout
        return json.loads(shown.stdout)

    doc = subject()
    assert (doc["files_live"], doc["files_attached"], doc["files_in_drafts"], doc["files_deleted_waiting"]) == (
        2,
        1,
        1,
        1,
    )
    assert doc["drafts"] == 1 and doc["messages"] == 1 and doc["events"] > 0 and doc["holds"] == []
    assert doc["ends"]["rule"] == "erasure"
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-1", "subject_id": str(ALEX.id)}).json
    doc = subject()
    assert doc["holds"] == [{"id": hold["id"], "case_ref": "CASE-1"}] and doc["files_held"] == 3
    assert doc["ends"]["rule"] == "hold"
    nobody = zygote.run(
        [sys.executable, "-m", "app.entry", "explain", "--subject", str(uuid.uuid4())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert nobody.returncode == 0 and "Lethe holds nothing of this person" in nobody.stdout
