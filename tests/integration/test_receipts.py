"""Deletion receipts (D16): every deletion path leaves a name-free receipt when the row is purged, readable by
`manage` only, and the cleanup removes receipts past privacy.receipt_ttl."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import pytest

from app.lifecycle.cleanup import run_cleanup
from app.lifecycle.retention import run_policy
from tests.support import zygote
from tests.support.helpers import problem, rows
from tests.support.lethe import ALEX, OWNER

RECEIPT_FIELDS = {
    "file_id",
    "via",
    "marked_at",
    "purged_at",
    "keys_deleted",
    "keys_confirmed_absent",
    "removal_began_at",
    "hold_too_late",
    "variants_deleted",
    "keys_locked",
    "stores",
}
CANARY = "Canary-Rc71-payslip"


def receipt(lethe, file_id):
    response = lethe.call("GET", f"/api/v1/receipts/{file_id}", OWNER)
    assert response.status_code == 200, response.json
    body = response.json
    assert set(body) == RECEIPT_FIELDS  # nothing else: no uploader, name, size or digest
    assert CANARY not in json.dumps(body) and str(ALEX.id) not in json.dumps(body)
    return body


def test_deletefile_leaves_a_receipt_once_purged(lethe):
    file_id = lethe.upload(ALEX, name=f"{CANARY}.pdf")
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    problem(lethe.call("GET", f"/api/v1/receipts/{file_id}", OWNER), 404, "not_found")  # not purged yet
    marked_at = lethe.clock.now()
    lethe.clock.advance(5)
    lethe.run_jobs("purge_objects")
    body = receipt(lethe, file_id)
    # the originals and variants, and on fs the key of its one part (a part landing after a completion goes too)
    parts = len(lethe.rt.store.part_keys(file_id, 1))
    assert body["via"] == "file" and body["keys_deleted"] == 6 + parts and body["keys_confirmed_absent"] == 0
    assert body["stores"] == ["default"]
    assert body["marked_at"].startswith(marked_at.isoformat()[:19])
    assert body["purged_at"] > body["marked_at"]
    problem(lethe.call("GET", f"/api/v1/receipts/{file_id}", ALEX), 403, "forbidden")


@pytest.mark.one_store
def test_every_deletion_path_names_itself(make_lethe, clamd):
    lethe = make_lethe(
        **{
            "scan.clamd_address": clamd.address,
            "retention.policies": json.dumps(
                [
                    {
                        "name": "exports",
                        "purpose": "gdpr_export",
                        "max_age": "30d",
                        "grace": "0s",
                        "schedule": "0 0 * * *",
                    }
                ]
            ),
        }
    )
    by_message = lethe.upload(ALEX)
    assert lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [by_message]}).status_code in (200, 201)
    assert lethe.call("DELETE", "/api/v1/messages/m-1", ALEX).status_code == 204
    unattached = lethe.upload(ALEX)
    clamd.mode = "eicar"
    infected = lethe.upload(ALEX, b"virus")
    clamd.mode = "ok"
    export = lethe.upload(OWNER, purpose="gdpr_export")
    lethe.clock.advance(lethe.cfg.file.failed_row_ttl + timedelta(days=30))
    assert run_cleanup(lethe.rt).ran
    run_policy(lethe.rt, lethe.cfg.retention.policies[0])
    lethe.run_jobs("purge_objects")
    vias = {file_id: receipt(lethe, file_id)["via"] for file_id in (by_message, unattached, infected, export)}
    assert vias == {
        by_message: "message",
        unattached: "cleanup_unattached",
        infected: "cleanup_failed",
        export: "retention",
    }


@pytest.mark.one_store
def test_receipts_older_than_the_ttl_are_removed_by_the_cleanup(make_lethe):
    lethe = make_lethe(**{"privacy.receipt_ttl": "30d"})
    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.run_jobs("purge_objects")
    lethe.clock.advance(timedelta(days=30))
    assert run_cleanup(lethe.rt, dry_run=True).step("g").acted == 0
    assert run_cleanup(lethe.rt).step("g").acted == 0
    lethe.clock.advance(timedelta(seconds=1))
    assert run_cleanup(lethe.rt, dry_run=True).step("g").acted == 1 and len(rows(lethe, "receipts")) == 1
    assert run_cleanup(lethe.rt).step("g").acted == 1
    assert rows(lethe, "receipts") == []


@pytest.mark.one_store
def test_lethe_receipt_prints_it(lethe, database_url, tmp_path):
    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.run_jobs("purge_objects")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "cli-objects"),
    }
    result = zygote.run(
        [sys.executable, "-m", "app.entry", "receipt", file_id, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["via"] == "file" and set(json.loads(result.stdout)) == RECEIPT_FIELDS
    missing = zygote.run(
        [sys.executable, "-m", "app.entry", "receipt", "00000000-0000-0000-0000-000000000001"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 1
