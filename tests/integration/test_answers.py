"""Answers that say what to do, as docs/api.md documents them: every status with its documented code, a 403 that
names the scope the token lacks, a 401 that names the claim, a part of the wrong size that says the right one, a
form sent where raw bytes go, the parts a completion still waits for, a body over a part's size; and an empty file,
which uploads as any other (native and tus), on fs, moto and SeaweedFS."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest

from app.api.problems import _CODES
from tests.support.helpers import problem
from tests.support.lethe import ALEX, OWNER, SAM, SECRET, Person

ROOT = Path(__file__).resolve().parents[2]
READER = Person("Reader", "reader@example.com", ("files:read",))


def documented_codes() -> dict[int, str]:
    """The answers table of docs/api.md: each status with the one code it documents."""
    text = (ROOT / "docs" / "api.md").read_text()
    table = text[text.index("## Answers") :]
    found: dict[Any, Any] = {}
    for status, code in re.findall(r"^\| (\d{3}) \| `([a-z_]+)`(?: \||,)", table, re.M):
        found.setdefault(int(status), code)
    return found


def test_every_status_answers_the_code_the_docs_give_it():
    documented = documented_codes()
    assert len(documented) >= 15
    for status, code in documented.items():
        if status in (502, 503):
            continue  # several codes, each raised by its own error class
        assert _CODES.get(status) == code, (status, code)


@pytest.mark.one_store
def test_a_range_past_the_end_answers_range_not_satisfiable(lethe):
    file_id = lethe.upload(ALEX, b"twelve bytes")
    answer = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": "bytes=100-200"})
    problem(answer, 416, "range_not_satisfiable", "range_not_satisfiable")
    assert answer.headers["Content-Range"] == "bytes */12"


@pytest.mark.one_store
def test_a_403_names_the_scope_the_token_lacks(lethe):
    file_id = lethe.upload(READER.__class__("Reader", READER.email, ("files:read", "files:write")))
    answer = lethe.call("DELETE", f"/api/v1/files/{file_id}", READER)
    problem(answer, 403, "forbidden", "scope_missing")
    assert "files:write" in answer.json["detail"]
    avatar = lethe.upload(ALEX, b"\x89PNG", name="me.png", purpose="avatar", mime_type="image/png")
    answer = lethe.call("PUT", f"/api/v1/principals/{SAM.id}/avatar", ALEX, json={"file_id": avatar})
    problem(answer, 403, "forbidden", "scope_missing")
    assert "manage" in answer.json["detail"]
    answer = lethe.call("PUT", f"/api/v1/principals/{READER.id}/avatar", READER, json={"file_id": avatar})
    problem(answer, 403, "forbidden", "scope_missing")
    assert "files:write" in answer.json["detail"]


@pytest.mark.one_store
@pytest.mark.parametrize(
    "claims, says",
    [
        ({"sub": "not-a-uuid", "exp": 4102444800}, "`sub` is not a UUID"),
        ({"sub": "7f7d6c9e-0000-4000-8000-000000000001"}, "no `exp` claim"),
        ({"sub": "7f7d6c9e-0000-4000-8000-000000000001", "exp": 4102444800, "nbf": 4102444000}, "not valid yet"),
    ],
)
def test_a_refused_token_says_which_claim_without_repeating_it(lethe, claims, says):
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    answer = lethe.app.test_client().get("/api/v1/files", headers={"Authorization": f"Bearer {token}"})
    problem(answer, 401, "unauthorized", "token_invalid")
    assert says in answer.json["detail"] and token not in answer.get_data(as_text=True)
    assert "not-a-uuid" not in answer.get_data(as_text=True)


@pytest.mark.one_store
def test_a_part_of_the_wrong_size_says_the_right_one_and_a_form_is_told_to_send_raw_bytes(lethe):
    size = lethe.cfg.file.part_size + 10
    created = lethe.call(
        "POST",
        "/api/v1/uploads",
        ALEX,
        json={"name": "two.bin", "size_bytes": size, "mime_type": "application/octet-stream"},
    )
    file_id = created.json["file"]["id"]
    answer = lethe.call(
        "PUT",
        f"/api/v1/uploads/{file_id}/parts/2",
        ALEX,
        data=b"x" * 9,
        headers={"Content-Type": "application/octet-stream"},
    )
    problem(answer, 409, "conflict", "wrong_part_size")
    assert "exactly 10 bytes" in answer.json["detail"] and "9 were sent" in answer.json["detail"]
    form = lethe.call(
        "PUT",
        f"/api/v1/uploads/{file_id}/parts/2",
        ALEX,
        data=b"x" * 10,
        headers={"Content-Type": "multipart/form-data; boundary=xyz"},
    )
    problem(form, 415, "unsupported_media_type", "raw_bytes_expected")
    assert "--data-binary" in form.json["detail"]
    # the parts a completion still waits for
    answer = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    problem(answer, 409, "conflict", "parts_missing")
    assert "1, 2" in answer.json["detail"]


@pytest.mark.one_store
def test_a_body_over_a_part_answers_413_with_its_reason_and_the_limit(lethe):
    too_much = b"x" * (lethe.cfg.file.part_size + 65 * 1024)
    answer = lethe.call(
        "PUT",
        f"/api/v1/uploads/{uuid.uuid4()}/parts/1",
        ALEX,
        data=too_much,
        headers={"Content-Type": "application/octet-stream"},
    )
    problem(answer, 413, "payload_too_large", "body_too_large")
    assert "at most" in answer.json["detail"]


@pytest.mark.one_store
@pytest.mark.parametrize("checksum", ["sha256 " + "ab" * 32, "sha256 !!notbase64", "sha256 " + "QQ=="])
def test_a_tus_checksum_that_is_no_base64_sha256_is_checksum_invalid(lethe, checksum):
    created = lethe.call(
        "POST",
        "/api/v1/tus",
        ALEX,
        headers={"Tus-Resumable": "1.0.0", "Upload-Length": "5", "Upload-Metadata": "filename bm90ZXM="},
    )
    location = created.headers["Location"]
    answer = lethe.call(
        "PATCH",
        location,
        ALEX,
        data=b"hello",
        headers={
            "Tus-Resumable": "1.0.0",
            "Upload-Offset": "0",
            "Content-Type": "application/offset+octet-stream",
            "Upload-Checksum": checksum,
        },
    )
    problem(answer, 400, "bad_request", "checksum_invalid")


@pytest.mark.one_store
def test_every_refused_case_reference_says_its_reason(lethe):
    for body in (
        {"subject_id": str(SAM.id), "case_ref": "bad ref!"},
        {"subject_id": str(SAM.id), "case_ref": ""},
        {"subject_id": str(SAM.id), "case_ref": "X" * 300},
    ):
        answer = lethe.call("POST", "/api/v1/holds", OWNER, json=body)
        assert answer.status_code == 422, answer.json
        assert answer.json.get("reason") == "case_ref_invalid", answer.json


@pytest.mark.parametrize("raw_store", ["fs", "s3", "seaweed-versioned"], indirect=True)
def test_an_empty_file_uploads_natively_and_through_tus(lethe):
    created = lethe.call(
        "POST", "/api/v1/uploads", ALEX, json={"name": "empty.txt", "size_bytes": 0, "mime_type": "text/plain"}
    )
    assert created.status_code == 201, created.json
    file_id = created.json["file"]["id"]
    # nothing to send: the completion is enough
    done = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    assert done.status_code == 200 and done.json["size_bytes"] == 0, done.json
    lethe.run_jobs("scan_file")
    content = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert content.status_code == 200 and content.data == b""
    # tus: Upload-Length 0 is complete at its creation
    created = lethe.call(
        "POST",
        "/api/v1/tus",
        ALEX,
        headers={"Tus-Resumable": "1.0.0", "Upload-Length": "0", "Upload-Metadata": "filename ZW1wdHkudHh0"},
    )
    assert created.status_code == 201, created.json
    tus_id = created.headers["Location"].rstrip("/").rsplit("/", 1)[-1]
    head = lethe.call("HEAD", created.headers["Location"], ALEX, headers={"Tus-Resumable": "1.0.0"})
    assert head.status_code == 200 and head.headers["Upload-Offset"] == "0"
    lethe.run_jobs("scan_file")
    deadline = time.monotonic() + 10
    while lethe.call("GET", f"/api/v1/files/{tus_id}", ALEX).json["upload_state"] != "complete":
        assert time.monotonic() < deadline
        lethe.run_jobs()
    assert lethe.call("GET", f"/api/v1/files/{tus_id}/content", ALEX).data == b""
