"""tus 1.0.0 at /api/v1/tus (issue 25) on the real database and every store: the protocol's answers, PATCH
bodies of any size cut into parts and a tail, termination and expiry leaving no byte (versions and multipart
uploads included). The real clients (tuspy, tus-js-client, Uppy) are in tests/e2e/test_tus_clients.py."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from typing import Any

import pytest
from hypothesis import strategies as st

from app.api.limits import Limiter
from app.domain.keys import tail_key
from app.domain.tus import encode_metadata, parse_metadata
from tests.support.helpers import problem, rows
from tests.support.helpers import residue as stored_residue
from tests.support.lethe import ALEX, OWNER, SAM, Person, sha256

TUS = {"Tus-Resumable": "1.0.0"}
OCTETS = "application/offset+octet-stream"


def create(
    lethe, length: int, person: Person = ALEX, name: str = "Holiday plan.txt", body: bytes | None = None, **metadata
):
    headers = {
        **TUS,
        "Upload-Length": str(length),
        "Upload-Metadata": encode_metadata({"filename": name, "filetype": "text/plain", **metadata}),
    }
    if body is not None:
        headers["Content-Type"] = OCTETS
    return lethe.call("POST", "/api/v1/tus", person, headers=headers, data=body)


def created_id(response) -> str:
    assert response.status_code == 201, response.get_data(as_text=True)
    location = response.headers["Location"]
    assert location.startswith("/api/v1/tus/")
    return location.rsplit("/", 1)[1]


def head(lethe, file_id: str, person: Person = ALEX):
    return lethe.call("HEAD", f"/api/v1/tus/{file_id}", person, headers=TUS)


def patch(
    lethe,
    file_id: str,
    offset: int,
    data: bytes,
    person: Person = ALEX,
    checksum: str | None = None,
    content_type: str = OCTETS,
):
    headers = {**TUS, "Upload-Offset": str(offset), "Content-Type": content_type}
    if checksum is not None:
        headers["Upload-Checksum"] = checksum
    return lethe.call("PATCH", f"/api/v1/tus/{file_id}", person, headers=headers, data=data)


def checksum_of(algorithm: str, data: bytes) -> str:
    return f"{algorithm} {base64.b64encode(hashlib.new(algorithm, data).digest()).decode()}"


def send(lethe, file_id: str, data: bytes, chunk: int, start: int = 0) -> None:
    offset = start
    while offset < len(data):
        response = patch(lethe, file_id, offset, data[offset : offset + chunk])
        assert response.status_code == 204, response.get_data(as_text=True)
        offset = int(response.headers["Upload-Offset"])
        assert offset == min(start + ((offset - start + chunk - 1) // chunk) * chunk, len(data))


def residue(lethe, file_id: str) -> list[Any]:
    """Everything the store holds of a file (tests/support/helpers.residue)."""
    return stored_residue(lethe.raw_store, file_id)


def chunk_sizes(lethe) -> tuple[int, int]:
    """A PATCH size below a part and one above (parts are 1 KiB here but on SeaweedFS, where they are 5 MiB)."""
    part = lethe.part_size
    return part * 7 // 10 - part * 7 // 10 % 4, part * 2 + part // 2 + 17


# -- discovery and the version -------------------------------------------------------------------------------


@pytest.mark.one_store
def test_options_needs_no_token_and_says_what_the_server_speaks(lethe):
    for path in ("/api/v1/tus", f"/api/v1/tus/{uuid.uuid4()}"):
        response = lethe.client.options(path)
        assert response.status_code == 204
        assert response.headers["Tus-Resumable"] == "1.0.0"
        assert response.headers["Tus-Version"] == "1.0.0"
        assert response.headers["Tus-Extension"] == "creation,creation-with-upload,termination,expiration,checksum"
        assert response.headers["Tus-Max-Size"] == str(lethe.cfg.file.max_size)
        assert response.headers["Tus-Checksum-Algorithm"] == "sha1,sha256,md5"


@pytest.mark.one_store
@pytest.mark.parametrize("version", [None, "0.2.2", "1.0", ""])
def test_a_request_without_tus_1_0_0_is_412_naming_the_version(lethe, version):
    headers = {"Upload-Length": "5"} | ({"Tus-Resumable": version} if version is not None else {})
    response = lethe.call("POST", "/api/v1/tus", ALEX, headers=headers)
    problem(response, 412, "precondition_failed", "tus_version_unsupported")
    assert response.headers["Tus-Version"] == "1.0.0"
    assert rows(lethe, "files") == []


@pytest.mark.one_store
def test_every_tus_request_needs_a_token(lethe):
    response = lethe.call("POST", "/api/v1/tus", headers={**TUS, "Upload-Length": "5"})
    problem(response, 401, "unauthorized")
    assert response.headers["Tus-Resumable"] == "1.0.0"


# -- creation ------------------------------------------------------------------------------------------------


def test_creation_makes_a_lethe_file_at_once_and_head_tells_its_uploader_everything(lethe):
    file_id = created_id(create(lethe, 10, purpose="attachment"))
    shown = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX)
    assert shown.status_code == 200 and shown.json["upload_state"] == "uploading"
    response = head(lethe, file_id)
    assert response.status_code == 200 and response.data == b""
    assert response.headers["Upload-Offset"] == "0" and response.headers["Upload-Length"] == "10"
    assert response.headers["Cache-Control"] == "no-store" and response.headers["Tus-Resumable"] == "1.0.0"
    metadata = parse_metadata(response.headers["Upload-Metadata"])
    assert metadata == {"filename": "Holiday plan.txt", "filetype": "text/plain", "purpose": "attachment"}
    expires = lethe.row(file_id).created_at + lethe.cfg.file.upload_session_ttl
    assert response.headers["Upload-Expires"] == expires.strftime("%a, %d %b %Y %H:%M:%S GMT")


@pytest.mark.one_store
def test_nobody_else_learns_of_an_upload_not_even_a_manager(lethe):
    file_id = created_id(create(lethe, 10))
    for person in (SAM, OWNER):
        response = head(lethe, file_id, person)
        assert response.status_code == 404 and "Upload-Metadata" not in response.headers
        problem(patch(lethe, file_id, 0, b"x", person), 404, "not_found")


@pytest.mark.one_store
def test_head_needs_files_read_and_patch_files_write(lethe):
    file_id = created_id(create(lethe, 10))
    writer = Person("Alex", ALEX.email, ("files:write",))
    reader = Person("Alex", ALEX.email, ("files:read",))
    assert head(lethe, file_id, writer).status_code == 403
    # files:write alone uploads: the PATCH answers its offset without reading the file.
    response = patch(lethe, file_id, 0, b"12345", writer)
    assert response.status_code == 204 and response.headers["Upload-Offset"] == "5"
    completed = patch(lethe, file_id, 5, b"67890", writer)
    assert completed.status_code == 204 and completed.headers["Upload-Offset"] == "10"
    problem(patch(lethe, file_id, 0, b"x", reader), 403, "forbidden")
    problem(create(lethe, 10, reader), 403, "forbidden")


@pytest.mark.one_store
@pytest.mark.parametrize(
    "headers, reason",
    [
        ({"Upload-Defer-Length": "1"}, "defer_length_unsupported"),
        ({}, "upload_length_required"),
        ({"Upload-Length": "-1"}, "upload_length_invalid"),
        ({"Upload-Length": "ten"}, "upload_length_invalid"),
        ({"Upload-Length": "5", "Upload-Metadata": "filename"}, None),  # a key without value: 422 below
        ({"Upload-Length": "5", "Upload-Metadata": "filename ***"}, "metadata_invalid"),
        ({"Upload-Length": "5", "Upload-Metadata": "a b c"}, "metadata_invalid"),
        ({"Upload-Length": "5", "Upload-Metadata": "filename eA==,filename eA=="}, "metadata_invalid"),
        ({"Upload-Length": "5", "Upload-Metadata": "filename eA==,sha256 eA=="}, "sha256_invalid"),
        ({"Upload-Length": "5", "Upload-Concat": "partial"}, "concatenation_unsupported"),
    ],
)
def test_a_creation_the_protocol_cannot_read_is_400(lethe, headers, reason):
    response = lethe.call("POST", "/api/v1/tus", ALEX, headers={**TUS, **headers})
    if reason is None:
        problem(response, 422, "invalid_request", "metadata_invalid")
    else:
        problem(response, 400, "bad_request", reason)
    assert rows(lethe, "files") == []


@pytest.mark.one_store
def test_a_creation_is_checked_as_create_upload_is_and_names_nothing_back(lethe):
    name = "Secret\x01name.txt"
    response = create(lethe, 5, name=name)
    body = problem(response, 422, "invalid_request", "metadata_invalid")
    assert list(body["errors"]) == ["filename"] and "Secret" not in response.get_data(as_text=True)
    problem(create(lethe, 5, purpose="nonsense"), 422, "invalid_request", "metadata_invalid")
    problem(create(lethe, -1), 400, "bad_request", "upload_length_invalid")  # (an empty file, 0, is a file)
    problem(
        lethe.call("POST", "/api/v1/tus", ALEX, headers={**TUS, "Upload-Length": "5"}),
        422,
        "invalid_request",
        "metadata_invalid",
    )  # no filename
    problem(create(lethe, lethe.cfg.file.max_size + 1), 413, "payload_too_large")
    assert rows(lethe, "files") == []


@pytest.mark.one_store
def test_uppy_s_metadata_names_are_understood(lethe):
    headers = {**TUS, "Upload-Length": "3", "Upload-Metadata": encode_metadata({"name": "a.png", "type": "image/png"})}
    file_id = created_id(lethe.call("POST", "/api/v1/tus", ALEX, headers=headers))
    row = lethe.row(file_id)
    assert (row.original_name, row.mime_type, row.purpose) == ("a.png", "image/png", "attachment")


# -- PATCH: any size, cut into parts and a tail --------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1])
def test_bodies_of_any_size_make_the_file_and_it_reads_back_equal(lethe, which):
    data = os.urandom(lethe.part_size * 2 + 333)
    file_id = created_id(create(lethe, len(data), sha256=sha256(data)))
    chunk = chunk_sizes(lethe)[which]
    send(lethe, file_id, data, chunk)
    row = lethe.row(file_id)
    assert row.upload_state == "complete" and row.sha256 == sha256(data)
    assert lethe.stored(file_id) == data
    # What is left in the store is the original alone: no part, no tail, no multipart upload.
    assert [entry for entry in residue(lethe, file_id) if "orig-1" not in str(entry)] == []
    response = head(lethe, file_id)
    assert response.headers["Upload-Offset"] == str(len(data)) and "Upload-Expires" not in response.headers
    lethe.run_jobs("scan_file")
    assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == data


def test_the_bytes_past_the_last_whole_part_wait_in_the_tail_and_count(lethe):
    data = os.urandom(lethe.part_size * 2)
    file_id = created_id(create(lethe, len(data)))
    small = chunk_sizes(lethe)[0]
    assert patch(lethe, file_id, 0, data[:small]).headers["Upload-Offset"] == str(small)
    assert lethe.tail(file_id) == data[:small]
    assert rows(lethe, "upload_parts", file_id=file_id) == []
    assert head(lethe, file_id).headers["Upload-Offset"] == str(small)
    rest = lethe.part_size + 10 - small
    assert patch(lethe, file_id, small, data[small : small + rest]).headers["Upload-Offset"] == str(small + rest)
    assert [p.part_number for p in rows(lethe, "upload_parts", file_id=file_id)] == [1]
    assert lethe.tail(file_id) == data[lethe.part_size : lethe.part_size + 10]


def test_creation_with_upload_takes_the_first_bytes(lethe):
    data = os.urandom(lethe.part_size + 5)
    first = chunk_sizes(lethe)[0]
    response = create(lethe, len(data), body=data[:first])
    file_id = created_id(response)
    assert response.headers["Upload-Offset"] == str(first)
    send(lethe, file_id, data, first, start=first)
    assert lethe.stored(file_id) == data


def test_a_whole_file_in_the_creation_completes_it(lethe):
    data = b"all of it at once"
    response = create(lethe, len(data), body=data, sha256=sha256(data))
    file_id = created_id(response)
    assert response.headers["Upload-Offset"] == str(len(data))
    assert lethe.row(file_id).upload_state == "complete"


@pytest.mark.one_store
def test_a_wrong_offset_is_409_a_wrong_type_415_and_bytes_past_the_length_413(lethe):
    file_id = created_id(create(lethe, 10))
    assert patch(lethe, file_id, 0, b"12345").status_code == 204
    problem(patch(lethe, file_id, 0, b"12345"), 409, "conflict", "offset_mismatch")
    problem(patch(lethe, file_id, 7, b"12345"), 409, "conflict", "offset_mismatch")
    problem(
        patch(lethe, file_id, 5, b"12345", content_type="application/octet-stream"),
        415,
        "unsupported_media_type",
        "offset_octet_stream_expected",
    )
    problem(patch(lethe, file_id, 5, b"123456"), 413, "payload_too_large", "past_upload_length")
    response = lethe.call("PATCH", f"/api/v1/tus/{file_id}", ALEX, data=b"1", headers={**TUS, "Content-Type": OCTETS})
    problem(response, 400, "bad_request", "upload_offset_required")
    assert head(lethe, file_id).headers["Upload-Offset"] == "5"


@pytest.mark.parametrize("algorithm", ["sha1", "sha256", "md5"])
def test_a_checksum_is_checked_and_a_mismatch_keeps_nothing_of_the_body(lethe, algorithm):
    data = os.urandom(lethe.part_size + 100)
    file_id = created_id(create(lethe, len(data)))
    small = chunk_sizes(lethe)[0]
    assert patch(lethe, file_id, 0, data[:small], checksum=checksum_of(algorithm, data[:small])).status_code == 204
    tail_before = lethe.raw_store.get(tail_key(file_id))
    rest = data[small:]
    wrong = checksum_of(algorithm, rest + b"x")
    problem(patch(lethe, file_id, small, rest, checksum=wrong), 460, "checksum_mismatch", "checksum_mismatch")
    assert head(lethe, file_id).headers["Upload-Offset"] == str(small)
    assert rows(lethe, "upload_parts", file_id=file_id) == []
    assert lethe.raw_store.get(tail_key(file_id)) == tail_before
    if lethe.driver == "fs":
        assert [key for key in residue(lethe, file_id) if "part-" in key] == []
    assert patch(lethe, file_id, small, rest, checksum=checksum_of(algorithm, rest)).status_code == 204
    assert lethe.stored(file_id) == data


@pytest.mark.one_store
@pytest.mark.parametrize("header", ["crc32 AAAA", "sha1", "sha1 ***", "sha1 a b"])
def test_a_checksum_header_it_cannot_use_is_400(lethe, header):
    file_id = created_id(create(lethe, 10))
    response = patch(lethe, file_id, 0, b"12345", checksum=header)
    assert response.status_code == 400 and response.json["reason"].startswith("checksum_")
    assert head(lethe, file_id).headers["Upload-Offset"] == "0"


def test_a_digest_mismatch_at_the_end_fails_the_file_as_complete_does(lethe):
    data = os.urandom(200)
    file_id = created_id(create(lethe, len(data), sha256=sha256(b"other")))
    problem(patch(lethe, file_id, 0, data), 409, "conflict", "checksum_mismatch")
    assert lethe.row(file_id).upload_state == "failed"
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == []


@pytest.mark.one_store
def test_a_second_patch_while_one_writes_is_409_busy_until_the_hold_lapses(make_lethe, clock):
    lethe = make_lethe(**{"file.write_wait": "0s"})
    file_id = created_id(create(lethe, 10))
    lethe.rt.db.unit_of_work(
        lambda uow: uow.conn.execute(
            "UPDATE upload_sessions SET writing_since = %s WHERE file_id = %s", (clock.now(), file_id)
        ),
        name="test",
    )
    problem(patch(lethe, file_id, 0, b"12345"), 409, "conflict", "upload_busy")
    clock.advance(lethe.cfg.file.write_timeout)
    assert patch(lethe, file_id, 0, b"12345").status_code == 204
    assert rows(lethe, "upload_sessions", file_id=file_id)[0].writing_since is None  # given back


@pytest.mark.one_store
def test_a_patch_waits_for_the_lease_of_a_patch_about_to_end(lethe, clock, monkeypatch):
    """A client that paused (or lost its connection) sends again at once, while the server still finishes what
    the old request wrote: the new PATCH waits for the old one's write lease (file.write_wait), not 409."""
    import threading

    from app.content import tus as tus_content
    from app.errors import Conflict

    file_id = created_id(create(lethe, 10))
    lethe.rt.db.unit_of_work(
        lambda uow: uow.conn.execute(
            "UPDATE upload_sessions SET writing_since = %s WHERE file_id = %s", (clock.now(), file_id)
        ),
        name="test",
    )
    refused = threading.Event()
    take_lease = tus_content._take_lease

    def watched(*args, **kwargs):
        try:
            return take_lease(*args, **kwargs)
        except Conflict as exc:
            if exc.reason == "upload_busy":
                refused.set()
            raise

    monkeypatch.setattr(tus_content, "_take_lease", watched)
    answers = []
    sender = threading.Thread(target=lambda: answers.append(patch(lethe, file_id, 0, b"12345")))
    sender.start()
    assert refused.wait(10), "the PATCH never met the lease"
    assert not answers  # it waits
    lethe.rt.db.unit_of_work(
        lambda uow: uow.conn.execute(  # the old request ends: its lease ends
            "UPDATE upload_sessions SET writing_since = NULL WHERE file_id = %s", (file_id,)
        ),
        name="test",
    )
    sender.join(10)
    assert answers and answers[0].status_code == 204, answers and answers[0].get_data(as_text=True)
    assert answers[0].headers["Upload-Offset"] == "5"


def test_a_tail_lost_with_its_store_sends_the_client_back_to_the_last_whole_part(lethe):
    data = os.urandom(lethe.part_size + 50)
    file_id = created_id(create(lethe, len(data)))
    first = lethe.part_size + 20
    assert patch(lethe, file_id, 0, data[:first]).status_code == 204
    lethe.raw_store.delete(tail_key(file_id))
    problem(patch(lethe, file_id, first, data[first:]), 409, "conflict", "offset_mismatch")
    assert head(lethe, file_id).headers["Upload-Offset"] == str(lethe.part_size)
    send(lethe, file_id, data, len(data), start=lethe.part_size)
    assert lethe.stored(file_id) == data


@pytest.mark.one_store
def test_a_native_part_of_a_tus_upload_is_refused(lethe):
    file_id = created_id(create(lethe, 10))
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=b"0123456789"), 409, "conflict", "tus_upload"
    )


@pytest.mark.one_store
def test_a_native_upload_is_not_a_tus_upload(lethe):
    created = lethe.start_upload(ALEX, b"hello")
    assert head(lethe, created["file"]["id"]).status_code == 404


# -- termination and expiry leave nothing --------------------------------------------------------------------


def test_termination_removes_every_byte_at_once(lethe):
    data = os.urandom(lethe.part_size * 2 + 7)
    file_id = created_id(create(lethe, len(data)))
    first = lethe.part_size + chunk_sizes(lethe)[0] // 2
    assert patch(lethe, file_id, 0, data[:first]).status_code == 204
    assert residue(lethe, file_id) != []
    response = lethe.call("DELETE", f"/api/v1/tus/{file_id}", ALEX, headers=TUS)
    assert response.status_code == 204 and response.headers["Tus-Resumable"] == "1.0.0"
    assert residue(lethe, file_id) == []  # at once, before any job ran
    assert head(lethe, file_id).status_code == 410  # a HEAD answer has no body
    problem(patch(lethe, file_id, first, b"x"), 410, "gone", "upload_terminated")
    assert lethe.row(file_id).upload_state == "failed"
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == []


@pytest.mark.one_store
def test_a_complete_upload_is_not_terminated_here_but_deleted_as_a_file(lethe):
    file_id = created_id(create(lethe, 5, body=b"12345"))
    problem(lethe.call("DELETE", f"/api/v1/tus/{file_id}", ALEX, headers=TUS), 409, "conflict", "upload_not_open")
    assert lethe.row(file_id).upload_state == "complete"


def test_an_expired_upload_is_gone_and_the_cleanup_leaves_no_byte(lethe, clock):
    data = os.urandom(lethe.part_size * 2)
    file_id = created_id(create(lethe, len(data)))
    first = lethe.part_size + chunk_sizes(lethe)[0] // 2
    response = patch(lethe, file_id, 0, data[:first])
    assert response.status_code == 204 and "Upload-Expires" in response.headers
    clock.advance(lethe.cfg.file.upload_session_ttl)
    assert head(lethe, file_id).status_code == 410
    problem(patch(lethe, file_id, first, data[first:]), 410, "gone", "upload_expired")
    assert residue(lethe, file_id) != []
    from app.lifecycle.cleanup import run_cleanup

    run_cleanup(lethe.rt)
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == []
    assert lethe.row(file_id).upload_state == "failed"


def test_a_deleted_upload_takes_its_tail_with_it(lethe):
    data = os.urandom(lethe.part_size * 2)
    file_id = created_id(create(lethe, len(data)))
    assert patch(lethe, file_id, 0, data[: lethe.part_size + 3]).status_code == 204
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == [] and lethe.row(file_id) is None
    receipt = rows(lethe, "receipts", file_id=file_id)[0]
    assert receipt.keys_deleted == 6 + 1 + (2 if lethe.driver == "fs" else 0)  # the tail, and fs parts


def test_a_patch_that_finds_its_upload_terminated_removes_what_it_wrote(lethe, swap_store):
    data = os.urandom(lethe.part_size + 10)
    file_id = created_id(create(lethe, len(data)))
    original = lethe.store

    class TerminateMidway:
        """A store that lets the upload be terminated while a PATCH writes its part."""

        def __getattr__(self, name):
            return getattr(original, name)

        terminated = False

        def put_part(self, ref, number, chunks):
            part = original.put_part(ref, number, chunks)
            if not self.terminated:  # (the PATCH may write its next part before it records: S3 then refuses it)
                response = lethe.call("DELETE", f"/api/v1/tus/{file_id}", ALEX, headers=TUS)
                assert response.status_code == 204
                self.terminated = True
            return part

    swap_store(lethe, TerminateMidway())
    problem(patch(lethe, file_id, 0, data), 410, "gone", "upload_terminated")
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == []


# -- generated requests: a clear answer, never a 500 ---------------------------------------------------------

_HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@pytest.mark.one_store
def test_generated_tus_requests_get_a_problem_answer_never_a_500(lethe):
    """Headers and bodies drawn at random (well-formed and not): every answer is tus's own or problem+json,
    never a 5xx, and the upload's offset only ever counts bytes it took."""
    from hypothesis import HealthCheck, given, settings

    file_id = created_id(create(lethe, 64))

    @given(
        method=st.sampled_from(["POST", "PATCH", "HEAD", "DELETE"]),
        headers=st.dictionaries(
            st.sampled_from(
                [
                    "Upload-Length",
                    "Upload-Offset",
                    "Upload-Metadata",
                    "Upload-Checksum",
                    "Upload-Defer-Length",
                    "Content-Type",
                ]
            ),
            st.one_of(
                _HEADER_TEXT,
                st.integers(-5, 100).map(str),
                st.sampled_from([OCTETS, "sha1 " + "A" * 28, "filename eA=="]),
            ),
        ),
        body=st.binary(max_size=80),
        target=st.sampled_from(["own", "unknown", "bad"]),
    )
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(method, headers, body, target):
        path = (
            "/api/v1/tus"
            if method == "POST"
            else {
                "own": f"/api/v1/tus/{file_id}",
                "unknown": f"/api/v1/tus/{uuid.uuid4()}",
                "bad": "/api/v1/tus/x%00y",
            }[target]
        )
        response = lethe.call(method, path, ALEX, headers={**TUS, **headers}, data=body)
        assert response.status_code < 500, (method, headers, response.get_data(as_text=True))
        if response.status_code >= 400 and method != "HEAD":
            assert response.mimetype == "application/problem+json", response.get_data(as_text=True)
        assert response.headers["Tus-Resumable"] == "1.0.0"

    check()
    offset = head(lethe, file_id)
    if offset.status_code == 200:
        assert int(offset.headers["Upload-Offset"]) <= 64


# -- CORS (api.cors_origins) ---------------------------------------------------------------------------------


@pytest.mark.one_store
def test_cors_is_off_by_default(lethe):
    response = lethe.client.options(
        "/api/v1/tus", headers={"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"}
    )
    assert response.status_code == 204 and "Access-Control-Allow-Origin" not in response.headers


@pytest.mark.one_store
def test_cors_lets_a_listed_origin_preflight_and_read_the_tus_headers(make_lethe):
    lethe = make_lethe(**{"api.cors_origins": "https://app.example.com"})
    file_id = created_id(create(lethe, 10))
    preflight = lethe.client.options(
        f"/api/v1/tus/{file_id}",
        headers={
            "Origin": "https://app.example.com",
            "Access-Control-Request-Method": "PATCH",
            "Access-Control-Request-Headers": "authorization,content-type,tus-resumable,upload-offset,upload-checksum",
        },
    )
    assert preflight.status_code == 204  # no token: a browser sends none with a preflight
    assert preflight.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    allowed = preflight.headers["Access-Control-Allow-Headers"].lower()
    assert all(name in allowed for name in ("authorization", "tus-resumable", "upload-offset", "upload-checksum"))
    assert "PATCH" in preflight.headers["Access-Control-Allow-Methods"]
    response = lethe.call("HEAD", f"/api/v1/tus/{file_id}", ALEX, headers={**TUS, "Origin": "https://app.example.com"})
    exposed = response.headers["Access-Control-Expose-Headers"].lower()
    assert all(
        name.lower() in exposed
        for name in ("Location", "Upload-Offset", "Upload-Length", "Upload-Expires", "Tus-Resumable")
    )
    other = lethe.call("HEAD", f"/api/v1/tus/{file_id}", ALEX, headers={**TUS, "Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other.headers


class Transactions:
    """Counts the transactions a request runs: each unit of work, and each read on an autocommit connection
    (at least one transaction of its own). The outbox's removal of a job it published after a commit is the
    jobs' plumbing, which every request that commits a job has (deleteFile's too): it is counted apart, and so is
    a rate limit's count of the request (one statement, the edge's, before the handler)."""

    def __init__(self, lethe, monkeypatch):
        self.names: list[str] = []
        self.publishing: list[str] = []
        db = lethe.rt.db
        unit_of_work, read, after_commit = db.unit_of_work, db.read, db.after_commit
        inside: list[bool] = []

        def counted_unit(fn, *, name):
            (self.publishing if inside else self.names).append(name)
            return unit_of_work(fn, name=name)

        def counted_read(fn):
            (self.publishing if inside else self.names).append("read")
            return read(fn)

        def publishing(jobs):
            inside.append(True)
            try:
                return after_commit(jobs)
            finally:
                inside.pop()

        def limiting(limiter, *args):  # a rate limit's count: its one statement, before the handler runs
            inside.append(True)
            try:
                return count(limiter, *args)
            finally:
                inside.pop()

        count = Limiter.count
        monkeypatch.setattr(db, "unit_of_work", counted_unit)
        monkeypatch.setattr(db, "read", counted_read)
        monkeypatch.setattr(db, "after_commit", publishing)
        monkeypatch.setattr(Limiter, "count", limiting)


def test_the_patch_that_brings_the_last_byte_runs_three_transactions(lethe, monkeypatch):
    """The PATCH that completes an upload: its lease, the last parts recorded with the completion begun, the
    completion recorded (the store's assembly and checks between them, never inside one)."""
    data = os.urandom(lethe.part_size * 2 + 50)
    file_id = created_id(create(lethe, len(data)))
    assert patch(lethe, file_id, 0, data[: lethe.part_size + 10]).status_code == 204  # a part and a tail
    counted = Transactions(lethe, monkeypatch)
    response = patch(lethe, file_id, lethe.part_size + 10, data[lethe.part_size + 10 :])
    assert response.status_code == 204, response.get_data(as_text=True)
    assert response.headers["Upload-Offset"] == str(len(data))
    assert len(counted.names) <= 3, counted.names
    assert lethe.stored(file_id) == data
    # What is left in the store is the original alone: no part, no tail, no multipart upload.
    assert [entry for entry in residue(lethe, file_id) if "orig-1" not in str(entry)] == []
    assert rows(lethe, "upload_sessions", file_id=file_id)[0].state == "completed"


@pytest.mark.one_store
def test_a_whole_file_in_one_patch_runs_three_transactions(lethe, monkeypatch):
    data = os.urandom(lethe.part_size * 3)
    file_id = created_id(create(lethe, len(data)))
    counted = Transactions(lethe, monkeypatch)
    assert patch(lethe, file_id, 0, data).status_code == 204
    assert len(counted.names) <= 3, counted.names
    assert lethe.stored(file_id) == data


@pytest.mark.one_store
def test_a_native_completion_runs_two_transactions(lethe, monkeypatch):
    data = os.urandom(lethe.part_size + 7)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.send_parts(ALEX, file_id, data, lethe.part_size)
    counted = Transactions(lethe, monkeypatch)
    response = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert len(counted.names) <= 2, counted.names
