"""D15 with a canary: no file name, object key, digest or token in a log record, a metric, a problem body,
a remaining event payload or a Sentry event, through every path a file can take, on both drivers."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from prometheus_client import REGISTRY, generate_latest

from app.db.conn import one
from app.lifecycle.cleanup import run_cleanup
from tests.support.lethe import ALEX, OWNER, SAM, sha256

CANARY = "Canary-7731-diagnosis"


def record_text(record: logging.LogRecord) -> str:
    return record.getMessage() + " " + json.dumps({k: str(v) for k, v in record.__dict__.items()})


@pytest.fixture
def everything_logged(caplog):
    """Every record at DEBUG from Lethe, and what the libraries log at the levels Lethe sets for them."""
    from app.platform.observability.log_setup import NOISY_LIBRARIES, quiet_libraries

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
    # A file served through a link (an <img>'s, with a range), then deleted: the link and its answers name
    # nothing, and the link, a credential, is never logged.
    served = upload(b"seventh")
    link = lethe.call("POST", f"/api/v1/files/{served}/links", ALEX, json={"disposition": "inline"}).json["url"]
    path = link.split("://", 1)[1].split("/", 1)[1]
    answers = [lethe.client.get("/" + path), lethe.client.get("/" + path, headers={"Range": "bytes=0-2"})]
    assert [answer.status_code for answer in answers] == [200, 206]
    link_texts = [link, *(str(answer.headers) for answer in answers)]
    lethe.call("DELETE", f"/api/v1/files/{served}", ALEX)
    lethe.run_jobs()
    lethe.clock.advance(lethe.cfg.file.failed_row_ttl + timedelta(seconds=1))
    run_cleanup(lethe.rt)
    lethe.run_jobs()
    bodies.append(
        lethe.call(
            "POST", "/api/v1/uploads", ALEX, json={"name": CANARY + "\x00", "size_bytes": 1, "mime_type": "text/plain"}
        ).get_data(as_text=True)
    )
    token = ALEX.headers["Authorization"].split()[1]
    secrets.update({CANARY, token})
    for text in link_texts:
        assert not any(secret in text for secret in secrets), text
        assert served not in text and uuid.UUID(served).hex not in text
    secrets.add(path.rsplit("/", 1)[1])  # the link's token

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
    stored = lethe.rt.db.read(
        lambda conn: conn.execute("SELECT payload::text AS p, redacted_at FROM events").fetchall()
    )
    remaining = lethe.rt.db.read(lambda conn: one(conn.execute("SELECT count(*) AS n FROM files")).n)
    assert remaining == 0
    assert stored and all(row.redacted_at is not None for row in stored)
    for row in stored:
        for secret in secrets:
            assert secret not in row.p


def rendered(record: logging.LogRecord) -> str:
    """What a record becomes on stdout, in both formats Lethe writes (exceptions included)."""
    from app.platform.observability.log_setup import make_formatter

    return make_formatter("json").format(record) + make_formatter("console").format(record)


class SentryCapture:
    """Installs Sentry with a transport that keeps what would be sent."""

    def __init__(self):
        from sentry_sdk.transport import Transport

        from app.platform.observability.sentry import setup_sentry

        self.sent: list[Any] = []
        sent = self.sent

        class Capture(Transport):
            def capture_envelope(self, envelope):
                for item in envelope.items:
                    if item.payload.json:
                        sent.append(item.payload.json)

        setup_sentry("https://public@sentry.invalid/1", "api", transport=Capture)

    def close(self) -> str:
        import sentry_sdk

        sentry_sdk.flush()
        sentry_sdk.init(dsn=None)
        return json.dumps(self.sent)


def a_check_violation(lethe, text: str):
    """A real CheckViolation whose DETAIL quotes the failing row, text included."""
    import psycopg

    try:
        lethe.rt.db.unit_of_work(
            lambda uow: uow.execute(
                "INSERT INTO drafts (user_id, draft_key, body, updated_at) VALUES (%s, %s, %s, now())",
                (ALEX.id, "bad key\n", text),
            ),
            name="test.violation",
        )
    except psycopg.errors.CheckViolation as exc:
        assert text in str(exc), "the DETAIL no longer quotes the row: the test would prove nothing"
        return exc
    raise AssertionError("no violation")


def test_sentry_events_carry_no_canary(lethe):
    import sentry_sdk

    capture = SentryCapture()
    try:
        file_id = lethe.upload(ALEX, b"bytes", name=f"{CANARY}.pdf")
        key = lethe.row(file_id).object_key
        logging.getLogger("lethe.test").error(
            "failure near a file", extra={"file_id": file_id, "original_name": CANARY}
        )
        for error in (RuntimeError(f"boom {CANARY} {key}"), a_check_violation(lethe, CANARY)):
            try:
                raise error
            except Exception:
                sentry_sdk.capture_exception()
    finally:
        text = capture.close()
    assert '"RuntimeError"' in text and "CheckViolation" in text, "no event reached the transport"
    assert CANARY not in text and key not in text


def test_a_database_detail_never_reaches_a_log_line(lethe, everything_logged):
    """Issue 9 finding 4: a constraint violation is a 422 or 409 problem, logged by constraint name and
    SQLSTATE; a traceback of it shows types and frames, never PostgreSQL's DETAIL."""
    from app.api.problems import from_database_error

    error = a_check_violation(lethe, CANARY)
    with lethe.app.app_context():
        response = from_database_error(error)
    assert response.status_code == 422 and CANARY not in response.get_data(as_text=True)
    try:
        raise RuntimeError("wrapped") from error
    except RuntimeError:
        logging.getLogger("lethe.test").exception("unhandled error")
    lines = [rendered(record) for record in everything_logged.records]
    assert any("CheckViolation (sqlstate 23514)" in line for line in lines)
    assert any("drafts_draft_key_check" in line for line in lines)
    assert not any(CANARY in line for line in lines)


# -- every field of every request carries the canary (issue 9 finding 4) ----------------------------------------

C = CANARY
DIGEST = hashlib.sha256(C.encode()).hexdigest()
FILE_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, C))
VARIANTS = [C, C + "\n", C + "\x00", C + "\ud800", "\n" + C]
SECRETS = (C, DIGEST, DIGEST.upper())


def requests_with_the_canary(real_file: str, real_upload: str):
    """(method, path, keyword arguments) for every route, with the canary in every field, good and bad."""
    upload = {"name": C, "size_bytes": 5, "mime_type": "text/plain"}
    for field, values in {
        "name": VARIANTS,
        "mime_type": [f"text/{v}" for v in VARIANTS] + VARIANTS,
        "sha256": [DIGEST, DIGEST + "\n", DIGEST.upper() + "\n", C],
        "purpose": VARIANTS,
        "scope_id": [C, FILE_ID, FILE_ID + "\n"],
        "size_bytes": [C, DIGEST],
    }.items():
        for value in values:
            yield "POST", "/api/v1/uploads", {"json": {**upload, field: value}}
    yield "POST", "/api/v1/uploads", {"json": {**upload, C: C}}
    yield "POST", "/api/v1/uploads", {"data": C, "headers": {"Content-Type": "application/json"}}
    for file_id in (FILE_ID, real_upload):
        yield "PUT", f"/api/v1/uploads/{file_id}/parts/1", {"data": C.encode()}
        yield "GET", f"/api/v1/uploads/{file_id}", {}
        yield "POST", f"/api/v1/uploads/{file_id}/complete", {}
        yield "DELETE", f"/api/v1/uploads/{file_id}", {}
    for path in (FILE_ID, real_file, C, quote(C + "\n")):
        yield "GET", f"/api/v1/files/{path}", {}
        yield "GET", f"/api/v1/files/{path}/content", {}
        yield "DELETE", f"/api/v1/files/{path}", {}
    for message_id in (C, quote(C + "\n"), quote(C + "\x00"), quote(C + "/x")):
        yield "PUT", f"/api/v1/messages/{message_id}", {"json": {"file_ids": [FILE_ID]}}
        yield "PUT", f"/api/v1/messages/{message_id}", {"json": {"file_ids": [C, real_file], C: C}}
        yield "DELETE", f"/api/v1/messages/{message_id}", {"query_string": {"author_id": C}}
    for key in (C, quote(C + "\n"), quote(C + "\x00")):
        for text in VARIANTS:
            yield "PUT", f"/api/v1/drafts/{key}", {"json": {"text": text, "file_ids": [FILE_ID]}}
        yield "PUT", f"/api/v1/drafts/{key}", {"json": {"text": C, "file_ids": [C], C: C}}
        yield "DELETE", f"/api/v1/drafts/{key}", {}
    yield "GET", "/api/v1/events", {"query_string": {"after": C, "limit": C}}
    yield "GET", "/api/v1/events", {"query_string": {"after": DIGEST}}
    yield "GET", f"/api/v1/{C}", {}


def test_every_field_of_every_request_keeps_the_canary_inside(make_lethe, clamd, everything_logged):
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    capture = SentryCapture()
    answers = []
    try:
        real_file = lethe.upload(ALEX, C.encode(), name=C)
        real_upload = lethe.start_upload(ALEX, b"fives", name=C, sha256=DIGEST)["file"]["id"]
        for method, path, kwargs in requests_with_the_canary(real_file, real_upload):
            rest = {name: value for name, value in kwargs.items() if name != "headers"}
            for token in (ALEX.headers["Authorization"], f"Bearer {C}"):
                headers = {**kwargs.get("headers", {}), "Authorization": token}
                answers.append((method, path, lethe.call(method, path, headers=headers, **rest)))
        lethe.run_jobs()
    finally:
        sentry_text = capture.close()
    assert len(answers) > 150
    crashed = [(m, p, a.status_code) for m, p, a in answers if a.status_code >= 500]
    assert crashed == [], crashed
    problems = [a.get_data(as_text=True) for _, _, a in answers if a.status_code >= 400]
    lines = [rendered(record) for record in everything_logged.records]
    metrics = generate_latest(REGISTRY).decode()
    assert problems and lines
    for secret in SECRETS:
        assert not [body for body in problems if secret in body]
        assert not [line for line in lines if secret in line]
        assert secret not in metrics and secret not in sentry_text


def test_tus_keeps_the_canary_inside(lethe, everything_logged):
    """Issue 25: a file name comes in Upload-Metadata (base64); no log line, metric or problem body carries it,
    through creation, PATCHes that fail every check, termination, a digest mismatch and expiry."""
    import base64 as b64

    from app.domain.tus import encode_metadata

    tus = {"Tus-Resumable": "1.0.0"}
    octets = {**tus, "Content-Type": "application/offset+octet-stream"}
    metadata = encode_metadata({"filename": f"{CANARY}.pdf", "filetype": "application/pdf"})
    bodies = []

    def call(method, path, person=ALEX, **kwargs):
        response = lethe.call(method, path, person, **kwargs)
        bodies.append(response.get_data(as_text=True) + json.dumps(dict(response.headers)))
        return response

    def create(length, extra=""):
        response = call(
            "POST", "/api/v1/tus", headers={**tus, "Upload-Length": str(length), "Upload-Metadata": metadata + extra}
        )
        return response.headers.get("Location", "")

    url = create(10)
    call("PATCH", url, headers={**octets, "Upload-Offset": "3"}, data=b"12345")
    call("PATCH", url, headers={**octets, "Upload-Offset": "0", "Upload-Checksum": "sha1 AAAA"}, data=b"12345")
    call("PATCH", url, headers={**octets, "Upload-Offset": "0"}, data=b"12345678901")
    call("PATCH", url, headers={**octets, "Upload-Offset": "0"}, data=b"12345")
    call("HEAD", url, person=SAM, headers=tus)
    call("DELETE", url, headers=tus)
    call("HEAD", url, headers=tus)
    bad = encode_metadata({"filename": f"{CANARY}\x01.pdf", "sha256": "0" * 64})
    call("POST", "/api/v1/tus", headers={**tus, "Upload-Length": "5", "Upload-Metadata": bad})
    digest = encode_metadata({"filename": f"{CANARY}.pdf", "sha256": "0" * 64})
    failing = call("POST", "/api/v1/tus", headers={**tus, "Upload-Length": "5", "Upload-Metadata": digest}).headers[
        "Location"
    ]
    call("PATCH", failing, headers={**octets, "Upload-Offset": "0"}, data=b"12345")
    expiring = create(10)
    call("PATCH", expiring, headers={**octets, "Upload-Offset": "0"}, data=b"123")
    lethe.clock.advance(lethe.cfg.file.upload_session_ttl)
    call("PATCH", expiring, headers={**octets, "Upload-Offset": "3"}, data=b"45")
    run_cleanup(lethe.rt)
    lethe.run_jobs()

    secrets = {CANARY, b64.b64encode(f"{CANARY}.pdf".encode()).decode(), metadata}
    assert everything_logged.records, "nothing was logged: the test would prove nothing"
    for record in everything_logged.records:
        for secret in secrets:
            assert secret not in record_text(record), f"{record.name}: {record.getMessage()}"
    metrics = generate_latest(REGISTRY).decode()
    for secret in secrets:
        assert secret not in metrics
        assert all(secret not in body for body in bodies), secret


@pytest.mark.one_store
def test_a_legal_hold_keeps_the_canary_and_the_subject_inside(lethe, everything_logged):
    """Issue 27: placing, deferring, releasing and purging under a hold log ids and counts only: never the file's
    name, key or digest, never the held subject's id, never the case reference."""
    case_ref = "CANARYLH27-27"
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"subject_id": str(ALEX.id), "case_ref": case_ref}).json
    owner = OWNER
    file_id = lethe.upload(ALEX, b"held " + CANARY.encode(), name=f"{CANARY}.pdf")
    secrets = {CANARY, lethe.row(file_id).object_key, sha256(b"held " + CANARY.encode()), str(ALEX.id), case_ref}
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.run_jobs()
    run_cleanup(lethe.rt)
    assert lethe.call("DELETE", f"/api/v1/holds/{hold['id']}", owner).status_code == 204
    lethe.run_jobs()
    assert lethe.row(file_id) is None
    logged = [record for record in everything_logged.records if record.name in ("lethe.holds", "lethe.purge")]
    assert {getattr(record, "event", None) for record in logged} >= {"hold.placed", "purge.deferred", "hold.released"}
    for record in everything_logged.records:
        text = record_text(record)
        for secret in secrets:
            assert secret not in text, f"{record.name}: {record.getMessage()}"
    metrics = generate_latest(REGISTRY).decode()
    assert all(secret not in metrics for secret in secrets)


@pytest.mark.one_store
def test_webhook_bodies_keep_the_canary_inside(make_lethe):
    """Issue 28: what a receiver gets (bodies and headers of file.purged, erasure.completed and the hold events)
    holds no name, key, digest, uploader, subject or case reference."""
    import base64
    import os

    from app.lifecycle.erasure import erase_round
    from tests.support.webhook_receiver import Receiver

    receiver = Receiver()
    try:
        secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
        lethe = make_lethe(
            **{
                "webhooks.endpoints": json.dumps(
                    [
                        {
                            "name": "app",
                            "url": receiver.url,
                            "secret": secret,
                            "events": ["file.purged", "erasure.completed", "hold.placed", "hold.released"],
                        }
                    ]
                )
            }
        )
        data = b"webhook " + CANARY.encode()
        file_id = lethe.upload(ALEX, data, name=f"{CANARY}.pdf")
        secrets = {CANARY, lethe.row(file_id).object_key, sha256(data), str(ALEX.id), "CANARYCASE-9"}
        hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"file_id": file_id, "case_ref": "CANARYCASE-9"}).json
        lethe.call("DELETE", f"/api/v1/holds/{hold['id']}", OWNER)
        erasure = lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(ALEX.id)}).json
        lethe.run_jobs()
        erase_round(lethe.rt, uuid.UUID(erasure["id"]))
        lethe.run_jobs()
        types = {json.loads(got.body)["type"] for got in receiver.received}
        assert types == {"hold.placed", "hold.released", "file.purged", "erasure.completed"}
        for got in receiver.received:
            text = got.body.decode() + json.dumps(got.headers)
            for value in secrets:
                assert value not in text
    finally:
        receiver.close()
