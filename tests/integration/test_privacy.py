"""D15 with a canary: no file name, object key, digest or token in a log record, a metric, a problem body,
a remaining event payload or a Sentry event, through every path a file can take, on both drivers."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import REGISTRY, generate_latest

from app.cleanup import run_cleanup
from tests.support.lethe import ALEX, sha256

CANARY = "Canary-7731-diagnosis"


def record_text(record: logging.LogRecord) -> str:
    return record.getMessage() + " " + json.dumps({k: str(v) for k, v in record.__dict__.items()})


@pytest.fixture
def everything_logged(caplog):
    """Every record at DEBUG from Lethe, and what the libraries log at the levels Lethe sets for them."""
    from app.observability import NOISY_LIBRARIES, quiet_libraries

    levels = {name: logging.getLogger(name).level for name in NOISY_LIBRARIES}
    caplog.set_level(logging.DEBUG)
    quiet_libraries()
    yield caplog
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_no_name_key_digest_or_token_leaves_the_service(make_lethe, clamd, everything_logged):
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    secrets = set()

    def upload(data, **fields):
        file_id = lethe.upload(ALEX, data, name=f"{CANARY}.pdf", **fields)
        secrets.update({lethe.row(file_id).object_key, sha256(data)})
        return file_id

    # A clean file attached to a message that is deleted, a file deleted by deleteFile, an infected file,
    # a checksum failure, an aborted upload, and the cleanup of a never attached file.
    attached = upload(b"first " + CANARY.encode())
    lethe.call("PUT", "/api/v1/messages/m1", ALEX, json={"file_ids": [attached]})
    lethe.call("DELETE", "/api/v1/messages/m1", ALEX)
    deleted = upload(b"second")
    lethe.call("DELETE", f"/api/v1/files/{deleted}", ALEX)
    clamd.mode = "eicar"
    upload(b"third")
    clamd.mode = "ok"
    created = lethe.start_upload(ALEX, b"fourth", name=f"{CANARY}.pdf", sha256="0" * 64)
    lethe.send_parts(ALEX, created["file"]["id"], b"fourth", created["upload"]["part_size"])
    bodies = [lethe.call("POST", f"/api/v1/uploads/{created['file']['id']}/complete", ALEX).get_data(as_text=True)]
    aborted = lethe.start_upload(ALEX, b"fifth", name=f"{CANARY}.pdf")["file"]["id"]
    lethe.call("DELETE", f"/api/v1/uploads/{aborted}", ALEX)
    upload(b"sixth")
    lethe.run_jobs()
    lethe.clock.advance(lethe.cfg.file.failed_row_ttl + 1)
    run_cleanup(lethe.rt)
    lethe.run_jobs()
    bodies.append(lethe.call("POST", "/api/v1/uploads", ALEX, json={"name": CANARY + "\x00", "size_bytes": 1,
                                                                      "mime_type": "text/plain"}).get_data(as_text=True))
    token = ALEX.headers["Authorization"].split()[1]
    secrets.update({CANARY, token})

    assert everything_logged.records, "nothing was logged: the test would prove nothing"
    for record in everything_logged.records:
        text = record_text(record)
        for secret in secrets:
            assert secret not in text, f"{record.name}: {record.getMessage()}"
    metrics = generate_latest(REGISTRY).decode()
    for secret in secrets:
        assert secret not in metrics
        assert all(secret not in body for body in bodies)
    # Every file is gone or failed: what remains of their events holds no name and no digest.
    stored = lethe.rt.db.read(lambda conn: conn.execute("SELECT payload::text AS p, redacted_at FROM events").fetchall())
    remaining = lethe.rt.db.read(lambda conn: conn.execute("SELECT count(*) AS n FROM files").fetchone().n)
    assert remaining == 0
    assert stored and all(row.redacted_at is not None for row in stored)
    for row in stored:
        for secret in secrets:
            assert secret not in row.p


def test_sentry_events_carry_no_canary(lethe):
    import sentry_sdk
    from sentry_sdk.transport import Transport

    from app.observability import setup_sentry

    sent = []

    class Capture(Transport):
        def capture_envelope(self, envelope):
            for item in envelope.items:
                if item.payload.json:
                    sent.append(item.payload.json)

    setup_sentry("https://public@sentry.invalid/1", "api", transport=Capture)
    try:
        file_id = lethe.upload(ALEX, b"bytes", name=f"{CANARY}.pdf")
        key = lethe.row(file_id).object_key
        logging.getLogger("lethe.test").error("failure near a file", extra={"file_id": file_id,
                                                                             "original_name": CANARY})
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            sentry_sdk.capture_exception()
        sentry_sdk.flush()
    finally:
        sentry_sdk.init(dsn=None)
    assert sent, "no event reached the transport: the test would prove nothing"
    text = json.dumps(sent)
    assert CANARY not in text and key not in text
