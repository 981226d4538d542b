"""Uploads through the HTTP API on the real database, for both drivers (D13)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, timedelta

import pytest

from app.domain.keys import part_key
from tests.support.helpers import problem
from tests.support.lethe import ALEX, OWNER, SAM, sha256


def test_a_full_upload_in_several_parts(lethe):
    data = os.urandom(lethe.part_size * 2 + 123)
    created = lethe.start_upload(ALEX, data, name="Quarterly report.pdf", sha256=sha256(data))
    file_id = created["file"]["id"]
    assert created["upload"]["part_count"] == 3
    assert created["upload"]["state"] == "open" and created["file"]["upload_state"] == "uploading"
    # Parts may come in any order and be sent again.
    part_size = created["upload"]["part_size"]
    for n in (3, 1, 2, 1):
        chunk = data[(n - 1) * part_size : n * part_size]
        response = lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/{n}", ALEX, data=chunk)
        assert response.status_code == 200 and response.json == {"part_number": n, "size_bytes": len(chunk)}
    shown = lethe.call("GET", f"/api/v1/uploads/{file_id}", ALEX).json
    assert shown["upload"]["parts_received"] == [1, 2, 3]
    completed = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    assert completed.status_code == 200
    assert completed.json["upload_state"] == "complete" and completed.json["scan_status"] == "pending"
    assert completed.json["sha256"] == sha256(data)
    assert lethe.stored(file_id) == data
    if lethe.driver == "fs":
        assert lethe.store.head(part_key(file_id, 1)) is None  # parts are gone after assembly
    # The scan job was committed with the completion; without clamd the outcome is skipped.
    assert lethe.run_jobs("scan_file") == 1
    shown = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json
    assert shown["scan_status"] == "skipped"
    content = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert content.status_code == 200 and content.data == data
    assert content.headers["Content-Length"] == str(len(data))
    assert (
        content.headers["Content-Disposition"]
        == "attachment; filename=\"Quarterly report.pdf\"; filename*=UTF-8''Quarterly%20report.pdf"
    )
    assert content.headers["X-Content-Type-Options"] == "nosniff"


def test_create_answers_what_a_read_of_the_upload_answers(lethe):
    """createUpload answers the rows its inserts returned (no read after the writes): the same document as
    getUpload's a moment later, to the field."""
    created = lethe.start_upload(ALEX, b"twelve bytes", name="notes.txt", sha256=sha256(b"twelve bytes"))
    shown = lethe.call("GET", f"/api/v1/uploads/{created['file']['id']}", ALEX)
    assert shown.status_code == 200 and shown.json == created


@pytest.mark.parametrize(
    "name, reason",
    [("", "empty"), ("x" * 256, "long"), ("bad\x00name", "nul"), ("tab\tname", "control"), ("del\x7f", "del")],
)
def test_bad_names_are_422(lethe, name, reason):
    response = lethe.call(
        "POST", "/api/v1/uploads", ALEX, json={"name": name, "size_bytes": 5, "mime_type": "text/plain"}
    )
    body = problem(response, 422, "invalid_request")
    assert "name" in body["errors"]
    if name:
        assert name not in response.get_data(as_text=True)  # the value is never echoed


def test_a_name_is_stored_as_given_and_never_used_in_a_key(lethe):
    name = "../../etc/passwd ünïcødé 名前.txt"
    file_id = lethe.upload(ALEX, b"abc", name=name)
    row = lethe.row(file_id)
    assert row.original_name == name
    assert "passwd" not in row.object_key and str(file_id) in row.object_key
    content = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    disposition = content.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="') and "filename*=UTF-8''" in disposition
    assert "\n" not in disposition and "名前" not in disposition  # percent-encoded


def test_too_large_is_413(lethe):
    response = lethe.call(
        "POST",
        "/api/v1/uploads",
        ALEX,
        json={"name": "big.iso", "size_bytes": 65 * 1024 * 1024, "mime_type": "application/x-iso9660-image"},
    )
    problem(response, 413, "payload_too_large")


@pytest.mark.parametrize(
    "body",
    [
        {"name": "a", "size_bytes": "5", "mime_type": "text/plain"},
        {"name": "a", "size_bytes": -1, "mime_type": "text/plain"},
        {"name": "a", "size_bytes": 5, "mime_type": "not a type"},
        {"name": "a", "size_bytes": 5, "mime_type": "text/plain", "sha256": "abc"},
        {"name": "a", "size_bytes": 5, "mime_type": "text/plain", "purpose": "poster"},
        {"name": "a", "size_bytes": 5, "mime_type": "text/plain", "colour": "red"},
        {"size_bytes": 5, "mime_type": "text/plain"},
    ],
)
def test_bad_create_bodies_are_422(lethe, body):
    problem(lethe.call("POST", "/api/v1/uploads", ALEX, json=body), 422, "invalid_request")


def test_restricted_purposes_need_manage(lethe):
    body = {"name": "logo.png", "size_bytes": 3, "mime_type": "image/png", "purpose": "branding"}
    problem(lethe.call("POST", "/api/v1/uploads", ALEX, json=body), 403, "forbidden")
    assert lethe.call("POST", "/api/v1/uploads", OWNER, json=body).status_code == 201


def test_part_number_out_of_range_and_wrong_size_are_409(lethe):
    """A part the upload's plan has no room for, or of another size than the plan says: a conflict with the upload
    (409), whatever the schema allows."""
    data = b"x" * 10
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/2", ALEX, data=data),
        409,
        "conflict",
        "part_number_out_of_range",
    )
    # 0, -1, a word, a huge number: the same answer (-1 and abc once answered a routing 404)
    for number in ("0", "-1", "abc", "1.5", "99999999999999999999", "%20"):
        problem(
            lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/{number}", ALEX, data=data),
            409,
            "conflict",
            "part_number_out_of_range",
        )
    # someone else's upload stays the same 404, whatever the part number
    problem(lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/abc", SAM, data=data), 404, "not_found")
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[:9]), 409, "conflict", "wrong_part_size"
    )
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data + b"!"),
        409,
        "conflict",
        "wrong_part_size",
    )


def test_a_body_larger_than_a_part_is_413(lethe):
    file_id = lethe.start_upload(ALEX, b"abc")["file"]["id"]
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=b"x" * (lethe.part_size + 65 * 1024)),
        413,
        "payload_too_large",
    )


def test_a_part_after_expiry_is_410(lethe):
    file_id = lethe.start_upload(ALEX, b"abc")["file"]["id"]
    lethe.clock.advance(lethe.cfg.file.upload_session_ttl - timedelta(microseconds=1))
    assert lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=b"abc").status_code == 200
    lethe.clock.advance(timedelta(microseconds=1))  # expired at expires_at exactly (D8)
    problem(lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=b"abc"), 410, "gone", "upload_expired")
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 410, "gone", "upload_expired")


def test_someone_elses_unknown_or_deleted_upload_is_the_same_404(lethe):
    file_id = lethe.start_upload(ALEX, b"abc")["file"]["id"]
    unknown = str(uuid.uuid4())
    answers = []
    for target, who in ((file_id, SAM), (unknown, ALEX)):
        for method, path in (("GET", ""), ("PUT", "/parts/1"), ("POST", "/complete"), ("DELETE", "")):
            response = lethe.call(method, f"/api/v1/uploads/{target}{path}", who, data=b"abc")
            problem(response, 404, "not_found")
            answers.append(response.get_data())
    assert len(set(answers)) == 1


def test_complete_with_parts_missing_is_409(lethe):
    data = b"y" * (lethe.part_size + 1)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[: lethe.part_size])
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 409, "conflict", "parts_missing")


def test_checksum_mismatch_fails_the_file(lethe):
    data = b"the real bytes"
    created = lethe.start_upload(ALEX, data, sha256=sha256(b"other bytes"))
    file_id = created["file"]["id"]
    lethe.send_parts(ALEX, file_id, data, created["upload"]["part_size"])
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 409, "conflict", "checksum_mismatch")
    shown = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json
    assert shown["upload_state"] == "failed"
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 409, "conflict", "upload_not_open")


def test_upper_case_checksums_are_accepted(lethe):
    data = b"case"
    file_id = lethe.upload(ALEX, data, sha256=sha256(data).upper())
    assert lethe.row(file_id).upload_state == "complete"


def test_abort_fails_the_file_and_drops_the_parts(lethe):
    data = b"z" * (lethe.part_size + 5)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[: lethe.part_size])
    assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX).status_code == 204
    assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX).status_code == 204  # idempotent
    shown = lethe.call("GET", f"/api/v1/uploads/{file_id}", ALEX).json
    assert shown["upload"]["state"] == "aborted" and shown["file"]["upload_state"] == "failed"
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[: lethe.part_size]),
        409,
        "conflict",
        "upload_not_open",
    )
    if lethe.driver == "fs":
        assert lethe.store.head(part_key(file_id, 1)) is None
    else:
        listed = lethe.raw_store.client._list_multipart_uploads(lethe.raw_store.bucket)
        assert [u for u in listed.uploads if str(file_id) in u.object_name] == []


def test_a_completed_upload_cannot_be_aborted(lethe):
    file_id = lethe.upload(ALEX)
    problem(lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX), 409, "conflict", "upload_not_open")


def test_writing_needs_files_write(lethe):
    from tests.support.lethe import Person

    reader = Person("Reader", "reader@example.com", ("files:read",))
    problem(
        lethe.call("POST", "/api/v1/uploads", reader, json={"name": "a", "size_bytes": 1, "mime_type": "text/plain"}),
        403,
        "forbidden",
    )


def test_no_credentials_is_401_before_anything_is_looked_up(lethe):
    file_id = lethe.upload(ALEX)
    for method, path in (
        ("GET", f"/api/v1/files/{file_id}"),
        ("GET", f"/api/v1/files/{uuid.uuid4()}"),
        ("GET", "/api/v1/files/not-a-uuid"),
        ("POST", "/api/v1/uploads"),
        ("GET", "/api/v1/events"),
        ("PUT", "/api/v1/messages/m1"),
    ):
        for headers, reason, challenge in (
            ({}, "token_missing", "Bearer"),
            ({"Authorization": "Bearer nonsense"}, "token_invalid", 'Bearer error="invalid_token"'),
            ({"Authorization": "Basic eDp5"}, "token_missing", "Bearer"),
        ):
            response = lethe.client.open(path, method=method, headers=headers)
            problem(response, 401, "unauthorized", reason)
            assert response.headers["WWW-Authenticate"] == challenge
            assert "nonsense" not in response.get_data(as_text=True)


def test_a_token_signed_with_another_key_or_expired_is_401(lethe):
    from datetime import datetime

    from app.entry.token import mint_token

    for token, reason in (
        (mint_token("another-secret-of-enough-length-123456", ALEX.id), "token_invalid"),
        (
            mint_token(
                "test-secret-for-hs256-tokens-0123456789",
                ALEX.id,
                ttl=timedelta(hours=1),
                now=datetime(2020, 1, 1, tzinfo=UTC),
            ),
            "token_expired",
        ),
        (mint_token("test-secret-for-hs256-tokens-0123456789", "not-a-uuid"), "token_invalid"),
    ):
        response = lethe.client.get("/api/v1/events", headers={"Authorization": f"Bearer {token}"})
        problem(response, 401, "unauthorized", reason)
        assert token not in response.get_data(as_text=True)


def test_a_failed_upload_says_it_was_never_scanned(lethe):
    """Issue 21: after a checksum_mismatch the file showed scan_status pending forever."""
    data = b"checked"
    created = lethe.start_upload(ALEX, data, sha256="0" * 64)
    file_id = created["file"]["id"]
    lethe.send_parts(ALEX, file_id, data, created["upload"]["part_size"])
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 409, "conflict", "checksum_mismatch")
    shown = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json
    assert (shown["upload_state"], shown["scan_status"]) == ("failed", "not_scanned")
    events = lethe.call("GET", "/api/v1/events", ALEX).json["events"]
    assert events[-1]["payload"]["file"]["scan_status"] == "not_scanned"


def test_a_part_streamed_without_its_length_is_kept_only_when_exact(lethe):
    """A part body without Content-Length is streamed to the store as it arrives (issue 24: no whole part in
    memory); one byte short or one too many answers 409 wrong_part_size and leaves nothing in the store."""
    import io

    data = os.urandom(lethe.part_size + 10)
    created = lethe.start_upload(ALEX, data, sha256=sha256(data))
    file_id, part_size = created["file"]["id"], created["upload"]["part_size"]

    def streamed(number, body):
        return lethe.client.put(
            f"/api/v1/uploads/{file_id}/parts/{number}",
            input_stream=io.BytesIO(body),
            headers={**ALEX.headers, "Content-Type": "application/octet-stream"},
            environ_overrides={"wsgi.input_terminated": True},
        )

    for wrong in (data[: part_size - 1], data[: part_size + 1]):
        problem(streamed(1, wrong), 409, "conflict", "wrong_part_size")
    assert lethe.call("GET", f"/api/v1/uploads/{file_id}", ALEX).json["upload"]["parts_received"] == []
    if lethe.driver == "fs":
        root = lethe.raw_store.root
        assert lethe.store.head(part_key(file_id, 1)) is None
        assert not os.listdir(os.path.join(root, ".tmp"))  # nothing half-written stays
    assert streamed(1, data[:part_size]).status_code == 200
    assert streamed(2, data[part_size:]).status_code == 200
    done = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    assert done.status_code == 200 and done.json["sha256"] == sha256(data)
    assert lethe.stored(file_id) == data


def test_a_part_is_read_in_chunks_never_whole(make_lethe):
    """No whole part in memory (issue 24): the api asks the body for at most a MiB at a time."""
    import io

    class Recording(io.BytesIO):
        largest = 0

        def read(self, size=-1):
            Recording.largest = max(Recording.largest, size if size is not None and size >= 0 else 1 << 62)
            return super().read(size)

        def readinto(self, buffer):
            Recording.largest = max(Recording.largest, len(buffer))
            return super().readinto(buffer)

    lethe = make_lethe(**{"file.part_size": str(6 * 1024 * 1024)})
    data = os.urandom(6 * 1024 * 1024)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    response = lethe.client.put(
        f"/api/v1/uploads/{file_id}/parts/1",
        input_stream=Recording(data),
        headers={**ALEX.headers, "Content-Type": "application/octet-stream", "Content-Length": str(len(data))},
    )
    assert response.status_code == 200, response.json
    assert 0 < Recording.largest <= 1024 * 1024
