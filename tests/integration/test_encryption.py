"""Per-file keys on fs, moto and SeaweedFS (versioned buckets): every object Lethe writes for a file (its parts, its
original, a tus tail, its variants) is ciphertext under the file's own data key; reads and every Range give the
plaintext back, a tampered segment an error and never altered bytes; the key goes at the point of no return of the
file's removal (a legal hold keeps it); rotation runs beside uploads and downloads; a key a live file needs may not
leave the keyring; on a bucket with object lock a deleted file's locked version stays listed and nothing Lethe
holds opens it; a database and a store restored from before a deletion, without their journal, after a rotation
and the retirement of the old key, never serve the deleted file as plaintext."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.db.conn import one
from app.domain.keys import VARIANTS, original_key, tail_key, variant_key
from app.domain.sealing import HEADER_BYTES, SEGMENT_BYTES, TAG_BYTES, Wrapped, sealed_size
from app.entry.support import keyring_problem
from app.errors import ContentCorrupt, KeyUnavailable, NotFound, StorageError
from app.lifecycle import keys
from app.platform.keys import Keyring
from app.storage.codec import ORIGINAL, Sealed
from tests.integration.test_tus import create as tus_create
from tests.integration.test_tus import created_id
from tests.integration.test_tus import patch as tus_patch
from tests.support import images, zygote
from tests.support.database import truncate_all
from tests.support.helpers import problem
from tests.support.keyring import TEST_KEYRING, keyring_entry
from tests.support.lethe import ALEX, OWNER, SAM, Lethe
from tests.support.stores import all_versions

SEG = SEGMENT_BYTES


# -- what "no plaintext in the store" means, checked ----------------------------------------------------------


def leaks(plain: bytes | list[bytes], blob: bytes) -> bool:
    """Whether any 64-byte window of `plain` (of any of several plaintexts) appears in `blob` (stricter: some
    32-byte runs count too). Such a window holds a 32-byte run of its plaintext that starts at a multiple of 8 and
    lies, in `blob`, at a multiple of 3 (8 and 3 are coprime and 8 x 3 <= 32): a set of the plaintexts' runs at
    stride 8, looked up at stride 3 of the blob, finds every such window."""
    return Windows(plain).found_in(blob)


class Windows:
    """The runs of one or more plaintexts, made once and looked for in as many blobs as a test has."""

    def __init__(self, plain: bytes | list[bytes]):
        plains = [plain] if isinstance(plain, bytes) else plain
        self.short = [text for text in plains if 0 < len(text) < 64]
        self.runs = {text[i : i + 32] for text in plains if len(text) >= 64 for i in range(0, len(text) - 31, 8)}

    def found_in(self, blob: bytes) -> bool:
        runs = self.runs
        return any(text in blob for text in self.short) or any(
            blob[j : j + 32] in runs for j in range(0, len(blob) - 31, 3)
        )


def test_the_leak_check_finds_any_window():
    plain = os.urandom(5000)
    for offset in (0, 1, 7, 999, 4936):
        blob = os.urandom(offset % 97) + plain[offset : offset + 64] + os.urandom(50)
        assert leaks(plain, blob), offset
        assert leaks([os.urandom(100), b"short", plain], blob), offset  # found among several plaintexts
    assert not leaks(plain, os.urandom(20000))
    assert leaks([os.urandom(100), b"a short one"], os.urandom(30) + b"a short one")
    assert not leaks(plain, b"".join(plain[i : i + 24] + b"-" for i in range(0, 4800, 24)))  # no run of 32


class Recording:
    """The real store, with every byte written to it recorded (put and put_part): what Lethe wrote, whatever the
    store does with it afterwards."""

    def __init__(self, inner):
        self.inner = inner
        self.written: list[tuple[str, bytes]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def put(self, key, data, length=None, content_type="application/octet-stream"):
        # bytes, a file, or chunks (an fs part, an assembly: parts are objects of their own there)
        blob = (
            data if isinstance(data, (bytes, bytearray)) else data.read() if hasattr(data, "read") else b"".join(data)
        )
        self.written.append((key, bytes(blob)))
        return self.inner.put(key, bytes(blob), len(blob), content_type)

    def put_part(self, ref, part_number, data):
        blob = data if isinstance(data, bytes) else b"".join(data)
        self.written.append((f"{ref.key}#part-{part_number}", blob))
        return self.inner.put_part(ref, part_number, blob)


def stored_blobs(raw_store, file_id: str) -> list[bytes]:
    """Every object (every version, on S3) the store holds under a file's keys."""
    if raw_store.driver == "fs":
        keys = (
            [original_key(uuid.UUID(file_id), r) for r in (1, 2)]
            + [variant_key(uuid.UUID(file_id), name) for name in VARIANTS]
            + [tail_key(uuid.UUID(file_id))]
        )
        return [raw_store.get(key) for key in keys if raw_store.head(key) is not None]
    return [
        b"".join(raw_store.client.get_object(raw_store.bucket, item.object_name, version_id=item.version_id).stream())
        for item in all_versions(raw_store)
        if file_id in item.object_name and not item.is_delete_marker
    ]


@pytest.fixture
def recorded(database_url, raw_store, clock):
    truncate_all(database_url)
    store = Recording(raw_store)
    lethe = Lethe(database_url, store, clock)
    yield lethe, store
    lethe.close()


def test_no_window_of_a_files_plaintext_is_in_any_object_lethe_wrote(recorded):
    lethe, store = recorded
    part = lethe.part_size
    # Given a file sent natively in three parts, one sent through tus (its first PATCH leaves a tail past a whole
    # part), and a photo, which gets variants
    native = os.urandom(part + 333)  # two pieces: the second begins where the first part ends
    native_id = lethe.upload(ALEX, native)
    tus = os.urandom(part + part // 2)
    tus_id = created_id(tus_create(lethe, len(tus)))
    assert tus_patch(lethe, tus_id, 0, tus[: part + 10]).status_code == 204
    assert lethe.tail(tus_id) == tus[part : part + 10]  # the tail, opened, is the bytes past the whole part
    tail_written = [blob for key, blob in store.written if key == tail_key(uuid.UUID(tus_id))]
    assert tail_written and not leaks(tus, tail_written[-1])
    assert tus_patch(lethe, tus_id, part + 10, tus[part + 10 :]).status_code == 204
    lethe.run_jobs("scan_file")
    photo = images.photo()
    photo_id = lethe.upload(ALEX, photo, name="holiday.jpg", mime_type="image/jpeg")
    lethe.run_jobs()
    made = [thumb["name"] for thumb in lethe.call("GET", f"/api/v1/files/{photo_id}", ALEX).json["thumbnails"]]
    assert len(made) == 3
    # (the photo is served as stored, without its metadata; what was sent is looked for in the store as well)
    plaintexts = {
        native_id: [native],
        tus_id: [tus],
        photo_id: [lethe.stored(photo_id), photo] + [lethe.stored(photo_id, name) for name in made],
    }
    # Then the reader gets every plaintext back...
    for file_id, (original, *_variants) in plaintexts.items():
        assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == original
        assert lethe.stored(file_id) == original
    # ...and no 64 bytes of any of them are in anything written to the store, nor in anything it holds now
    for file_id, texts in plaintexts.items():
        written = [blob for key, blob in store.written if file_id in key]
        kept = stored_blobs(lethe.raw_store, file_id)
        assert written and kept
        windows = Windows(texts)
        for blob in written + kept:
            assert not windows.found_in(blob), file_id
    # Its parts (on fs objects of their own, then their assembly, sealed piece by piece as they came)
    kinds = {"part" if "part-" in key else key.rsplit("/", 1)[-1] for key, _ in store.written if native_id in key}
    assert kinds == ({"part"} if store.inner.driver == "s3" else {"part", "orig-1"})
    assert any("/v-" in key for key, _ in store.written if photo_id in key)  # the variants were among them


def _ranges(size: int, part: int, rng: random.Random) -> list[tuple[int, int]]:
    """Ranges at the edges of segments and pieces, and random ones."""
    edges = sorted(
        {
            0,
            1,
            SEG - 1,
            SEG,
            SEG + 1,
            part - 1,
            part,
            part + 1,
            part + SEG,
            2 * part - 1,
            size - SEG,
            size - 2,
            size - 1,
        }
        & set(range(size))
    )
    spans = [(first, last) for first in edges for last in edges if last >= first]  # every pair of edges
    spans += [(min(a, b), max(a, b)) for a, b in ((rng.randrange(size), rng.randrange(size)) for _ in range(15))]
    return spans


def larger_pieces(raw_store) -> dict[str, Any]:
    """SeaweedFS takes parts of 5 MiB at least (many segments each); fs and moto take any: their pieces are made
    larger than a segment here, so that ranges cross segments inside a piece as well as pieces."""
    return {} if getattr(raw_store, "test_server", None) == "seaweed" else {"file.part_size": "200KiB"}


def test_downloads_and_every_range_equal_the_plaintext(make_lethe, raw_store):
    lethe = make_lethe(**larger_pieces(raw_store))
    part = lethe.cfg.file.part_size
    data = os.urandom(2 * part + part // 2 + 7)
    file_id = lethe.upload(ALEX, data)
    row = lethe.row(file_id)
    assert row.encrypted and row.piece_size == part and row.key_id == TEST_KEYRING.split(":")[0]
    whole = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert whole.status_code == 200 and whole.data == data and whole.headers["Content-Length"] == str(len(data))
    head = lethe.call("HEAD", f"/api/v1/files/{file_id}/content", ALEX)
    assert head.headers["Content-Length"] == str(len(data))
    rng = random.Random(40)
    for first, last in _ranges(len(data), part, rng):
        answer = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": f"bytes={first}-{last}"})
        assert answer.status_code == 206 and answer.data == data[first : last + 1], (first, last)
        assert answer.headers["Content-Range"] == f"bytes {first}-{last}/{len(data)}"
    for suffix in (1, 100, SEG + 3, len(data)):
        answer = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": f"bytes=-{suffix}"})
        assert answer.status_code == 206 and answer.data == data[-suffix:]
    answer = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": f"bytes={part - 5}-"})
    assert answer.data == data[part - 5 :]


def _tamper(raw_store, key: str, at: int) -> None:
    blob = bytearray(raw_store.get(key))
    blob[at] ^= 0x01
    raw_store.put(key, bytes(blob), len(blob))


def test_a_tampered_segment_answers_an_error_never_altered_bytes(make_lethe, raw_store):
    lethe = make_lethe(**larger_pieces(raw_store))
    part = lethe.cfg.file.part_size
    # the piece whose third segment is changed lies past the first MiB a download reads before it answers
    piece = max(1, -(-(1200 * 1024) // part))
    data = os.urandom(piece * part + 3 * SEG)
    file_id = lethe.upload(ALEX, data)
    key = lethe.row(file_id).object_key
    # Given one byte changed in the third segment of that piece
    _tamper(lethe.raw_store, key, piece * sealed_size(part) + HEADER_BYTES + 2 * (SEG + TAG_BYTES) + 100)
    content = f"/api/v1/files/{file_id}/content"
    # Then a range in that segment answers 502, never a byte of it
    inside = piece * part + 2 * SEG + 10
    problem(
        lethe.call("GET", content, ALEX, headers={"Range": f"bytes={inside}-{inside + 10}"}), 502, "content_corrupt"
    )
    # a range elsewhere still reads true
    answer = lethe.call("GET", content, ALEX, headers={"Range": f"bytes=5-{SEG + 5}"})
    assert answer.status_code == 206 and answer.data == data[5 : SEG + 6]
    # and the whole file ends short at that segment: what came before it is the plaintext, nothing after
    whole = lethe.call("GET", content, ALEX)
    assert whole.status_code == 200
    received = bytearray()
    with pytest.raises(ContentCorrupt):
        for chunk in whole.response:
            received += chunk
    assert len(received) < len(data) and data.startswith(bytes(received))
    # A changed header (its salt) fails the first read: a problem answer, not a body
    _tamper(lethe.raw_store, key, 5)
    problem(lethe.call("GET", content, ALEX), 502, "content_corrupt")


def test_a_tampered_or_swapped_wrapped_key_answers_content_corrupt(lethe):
    """A row's wrapped key changed or copied from another row, under an id whose key opens the other files, is that
    file's corruption: 502 content_corrupt (never retried as a configuration fault), nothing of it served; the
    other files of the id still read."""
    good = lethe.upload(ALEX, b"a file that opens" * 30)
    altered = lethe.upload(ALEX, b"a file whose key is changed" * 30)
    swapped = lethe.upload(ALEX, b"a file given another's key" * 30)
    rows = {file_id: lethe.row(file_id) for file_id in (good, altered, swapped)}
    changed = bytearray(rows[altered].wrapped_key)
    changed[20] ^= 0x01

    def write(conn):
        conn.execute("UPDATE files SET wrapped_key = %s WHERE id = %s", (bytes(changed), altered))
        conn.execute("UPDATE files SET wrapped_key = %s WHERE id = %s", (rows[good].wrapped_key, swapped))

    lethe.rt.db.unit_of_work(lambda uow: write(uow.conn), name="test.tamper")
    assert lethe.call("GET", f"/api/v1/files/{good}/content", ALEX).data == b"a file that opens" * 30
    for file_id in (altered, swapped):
        answer = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
        problem(answer, 502, "content_corrupt")
        assert b"a file" not in answer.data and "test-1" not in answer.get_data(as_text=True)
        link = lethe.call("POST", f"/api/v1/files/{file_id}/links", ALEX, json={"disposition": "attachment"})
        problem(lethe.client.get(link.json["url"].split("localhost", 1)[1]), 502, "content_corrupt")
    assert lethe.call("GET", f"/api/v1/files/{good}/content", ALEX).status_code == 200


def test_an_original_cut_short_answers_an_error_at_its_end(make_lethe, raw_store):
    lethe = make_lethe(**larger_pieces(raw_store))
    data = os.urandom(lethe.cfg.file.part_size + 2 * SEG + 9)
    file_id = lethe.upload(ALEX, data)
    key = lethe.row(file_id).object_key
    # Given the stored original without its last 20 bytes (its final tag cut)
    stored = lethe.raw_store.get(key)
    lethe.raw_store.put(key, stored[:-20], len(stored) - 20)
    content = f"/api/v1/files/{file_id}/content"
    # Then a range in its last segment answers 502, and one before it still reads true
    problem(lethe.call("GET", content, ALEX, headers={"Range": f"bytes={len(data) - 5}-"}), 502, "content_corrupt")
    answer = lethe.call("GET", content, ALEX, headers={"Range": "bytes=0-99"})
    assert answer.status_code == 206 and answer.data == data[:100]


@pytest.mark.one_store
def test_reads_of_a_sealed_file_leave_no_descriptor_open(lethe):
    data = os.urandom(3 * SEG + 5)
    file_id = lethe.upload(ALEX, data)
    row = lethe.row(file_id)
    files = lethe.rt.files

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    kept = []  # the readers stay referenced: what frees their descriptors is the read's end, not the collector
    for _ in range(20):
        whole = files.read(row, 7, 2 * SEG)
        assert b"".join(whole) == data[7 : 7 + 2 * SEG]  # read to its end
        abandoned = files.read(row)
        next(abandoned)
        abandoned.close()  # a client gone half-way
        unread = files.read(row, SEG, 10)
        unread.close()  # closed before its body was sent (the server's call_on_close)
        kept += [whole, abandoned, unread]
    assert files.measure(row) == (len(data), hashlib.sha256(data).hexdigest())
    # a first segment that does not open: the answer is an error, and the object is closed
    _tamper(lethe.raw_store, row.object_key, HEADER_BYTES + 3)
    for _ in range(5):
        with pytest.raises(ContentCorrupt):
            files.read(row)
        with pytest.raises(ContentCorrupt):
            files.measure(row)
    assert descriptors() <= before
    assert len(kept) == 60


def test_a_tampered_variant_answers_an_error(lethe):
    file_id = lethe.upload(ALEX, images.photo(), name="holiday.jpg", mime_type="image/jpeg")
    lethe.run_jobs()
    _tamper(lethe.raw_store, variant_key(uuid.UUID(file_id), "thumb-small"), HEADER_BYTES + 3)
    problem(lethe.call("GET", f"/api/v1/files/{file_id}/variants/thumb-small", ALEX), 502, "content_corrupt")
    assert lethe.call("GET", f"/api/v1/files/{file_id}/variants/preview", ALEX).status_code == 200


def test_a_files_key_goes_at_the_point_of_no_return_and_a_hold_keeps_it(lethe, swap_store):
    from tests.support.faults import FailOnce

    kept, deleted = lethe.upload(ALEX, b"kept bytes" * 50), lethe.upload(ALEX, b"deleted bytes" * 50)
    key = lethe.row(deleted).object_key
    # Given a purge whose deletes fail once: the file's removal began, its bytes are still in the store
    assert lethe.call("DELETE", f"/api/v1/files/{deleted}", ALEX).status_code == 204
    swap_store(lethe, FailOnce(lethe.rt.store, "delete_many"))
    with pytest.raises(StorageError):
        lethe.run_jobs("purge_objects")
    row = lethe.file_row(deleted)
    assert row is not None and row.deleted_at is not None and lethe.raw_store.head(key) is not None
    # Then nothing the database holds opens them any more: the key went with the point of no return
    assert row.wrapped_key is None and row.key_id is None
    with pytest.raises(NotFound):
        lethe.rt.files.read(row)
    assert lethe.file_row(kept).wrapped_key is not None
    # A legal hold keeps a deleted file's key with its bytes, until the release
    held = lethe.upload(SAM, b"evidence" * 50)
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-2026-0042", "file_id": held}).json
    assert lethe.call("DELETE", f"/api/v1/files/{held}", SAM).status_code == 204
    lethe.run_jobs()
    assert lethe.file_row(held).wrapped_key is not None and lethe.stored(held) == b"evidence" * 50
    assert lethe.call("DELETE", f"/api/v1/holds/{hold['id']}", OWNER).status_code in (200, 204)
    lethe.run_jobs()
    assert lethe.file_row(held) is None
    # An upload that ends without a file (aborted) loses its key; its row stays for the uploader
    created = lethe.start_upload(ALEX, b"never finished" * 100)
    aborted = created["file"]["id"]
    assert lethe.call("DELETE", f"/api/v1/uploads/{aborted}", ALEX).status_code == 204
    lethe.run_jobs()
    assert lethe.file_row(aborted).upload_state == "failed" and lethe.file_row(aborted).wrapped_key is None
    status = keys.status(lethe.rt)
    # `kept` has its key; the deleted file whose purge failed and the aborted upload are rows without one
    assert status.by_key_id == {"test-1": 1} and status.destroyed == 2


def test_rotation_while_uploads_and_downloads_run(make_lethe):
    old = make_lethe()
    before = {old.upload(ALEX, os.urandom(3000 + n)): None for n in range(12)}
    for file_id in before:
        before[file_id] = old.stored(file_id)
    # Given a new key at the front of the keyring (every process restarted with it)
    ring = f"{keyring_entry('test-2')},{TEST_KEYRING}"
    new = make_lethe(**{"file.keyring": ring})
    uploaded: dict[str, bytes] = {}
    failures: list[str] = []
    stop = threading.Event()

    rotating = threading.Event()

    def upload() -> None:
        for n in range(8):
            if n == 4:
                assert rotating.wait(30)  # the second half while the rotation runs
            data = os.urandom(2500 + n)
            uploaded[new.upload(SAM, data)] = data

    passes = threading.Semaphore(0)  # a download pass over every file ended

    def download() -> None:
        client = new.app.test_client()
        while not stop.is_set():
            for file_id, data in list(before.items()) + list(uploaded.items()):
                owner = ALEX if file_id in before else SAM
                answer = client.get(f"/api/v1/files/{file_id}/content", headers=owner.headers)
                if answer.status_code != 200 or answer.data != data:
                    failures.append(f"{answer.status_code}")
            passes.release()

    overlapped: list[int] = []

    def between_batches(done: int) -> None:
        # each committed batch waits for a whole download pass: files under both keys are read mid-rotation
        rotating.set()
        assert passes.acquire(timeout=30)
        overlapped.append(done)

    threads = [threading.Thread(target=upload), threading.Thread(target=download)]
    for thread in threads:
        thread.start()
    # When the rotation runs beside them, a few files a transaction
    report = keys.rotate(new.rt, batch_size=3, on_batch=between_batches)
    threads[0].join(60)
    stop.set()
    threads[1].join(60)
    # Then nothing read wrong, every live key is under the new key, and the old key can leave the keyring
    assert overlapped == [3, 3, 3, 3] and len(uploaded) == 8  # four batches, each followed by a download pass
    assert failures == []
    assert report.left == {} and report.rewrapped == len(before)
    status = keys.status(new.rt)
    assert status.by_key_id == {"test-2": len(before) + len(uploaded), "test-1": 0} and status.missing == []
    retired = make_lethe(**{"file.keyring": keyring_entry("test-2")})
    for file_id, data in list(before.items()) + list(uploaded.items()):
        owner = ALEX if file_id in before else SAM
        assert retired.call("GET", f"/api/v1/files/{file_id}/content", owner).data == data
    assert keys.rotate(new.rt).rewrapped == 0  # run again: nothing left to do


@pytest.mark.one_store
def test_rotation_leaves_what_another_transaction_holds_and_a_run_again_takes_it_up(make_lethe, database_url):
    import psycopg

    from app.db import file_keys

    old = make_lethe()
    files = [old.upload(ALEX, os.urandom(100 + n)) for n in range(5)]
    new = make_lethe(**{"file.keyring": f"{keyring_entry('test-2')},{TEST_KEYRING}"})
    # Given one file's row held by another transaction (a purge, a hold) through the whole rotation
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM files WHERE id = %s FOR UPDATE", (files[2],))
        report = keys.rotate(new.rt, batch_size=2)
        # Then it is left, counted, and the command would exit 1
        assert report.rewrapped == 4 and report.left == {"test-1": 1}
    # When run again, it takes up what was left, and then there is nothing to do
    assert keys.rotate(new.rt, batch_size=2).rewrapped == 1
    assert keys.status(new.rt).by_key_id == {"test-2": 5, "test-1": 0}
    # A file whose key went while its rotation was computed keeps no key: a wrapping is written only over a key
    ended = uuid.UUID(files[0])
    again = new.rt.db.read(lambda conn: file_keys.lock_wrapped_by(conn, "test-2", uuid.UUID(int=0), 10))
    assert new.rt.db.unit_of_work(lambda uow: file_keys.destroy(uow.conn, [ended]), name="test.destroy") == 1
    assert new.rt.db.unit_of_work(lambda uow: file_keys.set_wrapped(uow.conn, again), name="test.rewrap") == 4
    assert new.row(files[0]).wrapped_key is None and new.row(files[1]).wrapped_key is not None
    for file_id in files[1:]:
        assert new.call("GET", f"/api/v1/files/{file_id}/content", ALEX).status_code == 200


@pytest.mark.one_store
def test_a_key_a_live_file_needs_may_not_leave_the_keyring(lethe, database_url, tmp_path):
    lethe.upload(ALEX, b"needs test-1")
    other = keyring_entry("test-9")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_BROKER_URL": "amqp://guest:guest@127.0.0.1:1/",
        "LETHE_AUTH_JWT_SECRET": "a-secret-of-sufficient-length-0",
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        "LETHE_FILE_ENCRYPTION": "on",
        "LETHE_FILE_KEYRING": other,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    for args in (["api"], ["worker"], ["scheduler"], ["config", "check"]):
        result = zygote.run(
            [sys.executable, "-m", "app.entry", *args], capture_output=True, text=True, env=env, timeout=60
        )
        said = result.stdout + result.stderr
        assert result.returncode == 2, (args, said)
        assert "file.keyring" in said and "test-1" in said and "Traceback" not in said, args
        assert other.split(":")[1] not in said and TEST_KEYRING.split(":")[1] not in said
    shown = zygote.run(
        [sys.executable, "-m", "app.entry", "keys", "status", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert shown.returncode == 1 and '"missing_key_ids": ["test-1"]' in shown.stdout
    # with the key back, second in the keyring, the roles start (config check stands for them)
    env["LETHE_FILE_KEYRING"] = f"{other},{TEST_KEYRING}"
    assert (
        zygote.run(
            [sys.executable, "-m", "app.entry", "config", "check"], capture_output=True, text=True, env=env, timeout=60
        ).returncode
        == 0
    )


@pytest.mark.one_store
def test_another_key_under_a_known_id_keeps_every_file_and_says_so(make_lethe, clamd):
    right = make_lethe(**{"scan.clamd_address": clamd.address})
    scanned = right.upload(ALEX, b"scanned under test-1")
    waiting = right.upload(ALEX, b"its scan not yet run", scan=False)
    started = right.start_upload(ALEX, b"parts sent, not completed")["file"]["id"]
    right.send_parts(ALEX, started, b"parts sent, not completed", right.part_size)
    # Given a keyring made again: another key under the id the files' rows name
    wrong = make_lethe(
        **{"file.keyring": "test-1:" + keyring_entry("other").split(":")[1], "scan.clamd_address": clamd.address}
    )
    # Then the roles refuse to start, naming the id and never a key
    problem_found = keyring_problem(wrong.cfg)
    assert problem_found is not None and list(problem_found.errors) == ["file.keyring"]
    said = " ".join(problem_found.errors["file.keyring"])
    assert "test-1" in said and "open none" in said and keyring_entry("other").split(":")[1] not in said
    assert keyring_problem(right.cfg) is None
    # and a process that runs anyway ends nothing: a download, a completion answer 503, a scan fails to be retried
    problem(wrong.call("GET", f"/api/v1/files/{scanned}/content", ALEX), 503, "key_unavailable")
    problem(wrong.call("POST", f"/api/v1/uploads/{started}/complete", ALEX), 503, "key_unavailable")
    from workers.actors import ACTORS

    with pytest.raises(KeyUnavailable):
        ACTORS["scan_file"].fn(wrong.rt, waiting)
    assert wrong.file_row(waiting).scan_status == "pending" and wrong.file_row(waiting).wrapped_key is not None
    assert keys.rotate(wrong.rt).unusable == 0  # the current key: nothing to wrap again
    # When the right key is back, everything goes on as if nothing happened
    right.run_jobs("scan_file")
    assert right.file_row(waiting).scan_status == "clean"
    assert right.call("POST", f"/api/v1/uploads/{started}/complete", ALEX).status_code == 200
    for file_id, data in ((scanned, b"scanned under test-1"), (waiting, b"its scan not yet run")):
        assert right.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == data


def opened_by_nothing(lethe: Lethe, file_id: str, blob: bytes, size: int) -> bool:
    """Whether nothing Lethe holds opens a file's sealed original `blob`: not a data key of any row the database
    holds (unwrapped by the keyring), not a keyring key taken for a data key."""
    ring = Keyring(lethe.cfg.file.keyring)
    wrapped = lethe.rt.db.read(
        lambda conn: conn.execute("SELECT id, key_id, wrapped_key FROM files WHERE wrapped_key IS NOT NULL").fetchall()
    )
    candidates = [ring.unwrap(row.id, Wrapped(row.key_id, row.wrapped_key)) for row in wrapped if row.key_id in ring]
    candidates += [entry.material for entry in lethe.cfg.file.keyring]
    assert candidates  # something to try
    for candidate in candidates:
        sealed = Sealed(uuid.UUID(file_id), candidate, lethe.part_size)
        try:
            b"".join(sealed.open_whole(lambda at, n: iter([blob[at : at + n]]), ORIGINAL, size, lethe.part_size))
        except ContentCorrupt:
            continue
        return False
    return True


# -- the object lock drill -------------------------------------------------------------------------------------


@pytest.mark.one_store
def test_a_deleted_files_locked_version_stays_listed_and_nothing_lethe_holds_opens_it(moto_server, database_url, clock):
    from minio.commonconfig import COMPLIANCE
    from minio.objectlockconfig import DAYS, ObjectLockConfig
    from minio.retention import Retention

    from app.storage.s3 import S3Store

    truncate_all(database_url)
    bucket = f"locked-{uuid.uuid4().hex[:10]}"
    store = S3Store(moto_server, bucket, "testing", "testing", region="us-east-1", secure=False)
    store.client.make_bucket(bucket, object_lock=True)
    store.client.set_object_lock_config(bucket, ObjectLockConfig(COMPLIANCE, 1, DAYS))
    setattr(store, "test_server", "moto")  # noqa: B010 (what the suite's stores carry)
    assert store.describe()["object_lock"] == "enabled"
    lethe = Lethe(database_url, store, clock)
    try:
        data = os.urandom(3 * lethe.part_size + 10)
        file_id = lethe.upload(ALEX, data)
        key = lethe.row(file_id).object_key
        # moto applies the bucket's default retention to a plain PUT but not to a completed multipart upload, as
        # AWS S3 does: lock the original's version as AWS would have
        version = store.client.stat_object(bucket, key).version_id
        until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)  # the server's clock
        store.client.set_object_retention(bucket, key, Retention(COMPLIANCE, until), version_id=version)
        # When the file is deleted and purged (what its row holds recorded when the store is asked to delete it)
        at_delete: list[tuple[str, bytes | None]] = []
        delete_many = store.delete_many

        def recording_delete_many(keys_):
            keys_ = list(keys_)
            if key in keys_:
                at_delete.append((file_id, lethe.row(file_id).wrapped_key))
            return delete_many(keys_)

        setattr(store, "delete_many", recording_delete_many)  # noqa: B010
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
        lethe.run_jobs()
        setattr(store, "delete_many", delete_many)  # noqa: B010
        # Then the purge ended (row gone, nothing left to retry), its receipt counts the locked version...
        assert lethe.row(file_id) is None
        receipt = lethe.call("GET", f"/api/v1/receipts/{file_id}", OWNER).json
        assert receipt["keys_locked"] == 1
        assert store.head(key) is None  # a delete marker over it: no plain read finds it
        # ...the locked version is still listed, in ciphertext...
        locked = [item for item in all_versions(store) if item.object_name == key and not item.is_delete_marker]
        assert [item.version_id for item in locked] == [version]
        blob = b"".join(store.client.get_object(bucket, key, version_id=version).stream())
        assert not leaks(data, blob)
        # ...and nothing Lethe holds opens it: no row's wrapped key (unwrapped by the keyring), no keyring key, and
        # no backup taken while the store was asked to delete it (the key was gone before that call)
        assert opened_by_nothing(lethe, file_id, blob, len(data))
        assert (
            lethe.rt.db.read(
                lambda conn: one(conn.execute("SELECT count(*) AS n FROM files WHERE id = %s", (file_id,)))
            ).n
            == 0
        )
        assert at_delete == [(file_id, None)]
        # An erasure of a person whose file's version is locked completes: what it finds left is that version
        from app.lifecycle.erasure import erase_round, request_erasure

        sams = lethe.upload(SAM, os.urandom(lethe.part_size + 5))
        sams_key = lethe.row(sams).object_key
        sams_version = store.client.stat_object(bucket, sams_key).version_id
        store.client.set_object_retention(bucket, sams_key, Retention(COMPLIANCE, until), version_id=sams_version)
        erasure = request_erasure(lethe.rt, None, SAM.id)
        lethe.run_jobs()
        while erase_round(lethe.rt, erasure.id) == "running":
            lethe.run_jobs()
        done = lethe.call("GET", f"/api/v1/erasures/{erasure.id}", OWNER).json
        assert done["state"] == "complete" and done["files_purged"] == 1, done
        assert [
            item.version_id
            for item in all_versions(store)
            if item.object_name == sams_key and not item.is_delete_marker
        ] == [sams_version]
        # The cleanup finds nothing to catch up: no state it could stay in
        from app.lifecycle.cleanup import run_cleanup

        report = run_cleanup(lethe.rt)
        assert (
            report.first_error is None
            and lethe.rt.db.read(
                lambda conn: one(conn.execute("SELECT count(*) AS n FROM files WHERE deleted_at IS NOT NULL"))
            ).n
            == 0
        )
    finally:
        lethe.close()


def test_a_role_refuses_an_object_locked_bucket_only_for_files_stored_as_they_are(moto_server, tmp_path):
    from minio.commonconfig import COMPLIANCE
    from minio.objectlockconfig import DAYS, ObjectLockConfig

    from app.storage.s3 import S3Store

    bucket = f"locked-{uuid.uuid4().hex[:10]}"
    store = S3Store(moto_server, bucket, "testing", "testing", region="us-east-1", secure=False)
    store.client.make_bucket(bucket, object_lock=True)
    store.client.set_object_lock_config(bucket, ObjectLockConfig(COMPLIANCE, 1, DAYS))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_AUTH_JWT_SECRET": "a-secret-of-sufficient-length-0",
        "LETHE_FILE_STORAGE_DRIVER": "s3",
        "LETHE_FILE_S3_ENDPOINT": moto_server,
        "LETHE_FILE_S3_BUCKET": bucket,
        "LETHE_FILE_S3_ACCESS_KEY": "testing",
        "LETHE_FILE_S3_SECRET_KEY": "testing",
        "LETHE_FILE_S3_REGION": "us-east-1",
        "LETHE_FILE_S3_SECURE": "false",
    }

    def check(**more):
        return zygote.run(
            [sys.executable, "-m", "app.entry", "config", "check"],
            capture_output=True,
            text=True,
            env={**env, **more},
            timeout=60,
        )

    plain = check(LETHE_FILE_ENCRYPTION="off")
    assert plain.returncode == 2 and "file.s3.bucket" in plain.stdout and "file.encryption" in plain.stdout
    sealed = check(LETHE_FILE_ENCRYPTION="on", LETHE_FILE_KEYRING=TEST_KEYRING)
    assert sealed.returncode == 0 and "object lock enabled" in sealed.stdout


# -- the restore drill -------------------------------------------------------------------------------------------


@pytest.mark.one_store
def test_a_backup_restored_without_its_journal_after_the_old_key_retired_never_serves_the_deleted_file(
    make_lethe, database_url, raw_store, tmp_path
):
    from app.entry.support import keyring_problem
    from tests.integration.test_journal import dump, restore_dump

    old = make_lethe(**{"journal.enabled": "false"})
    secret = b"the deleted file's words " * 40
    deleted, live = old.upload(ALEX, secret), old.upload(ALEX, b"a file that stays" * 40)
    # Given a database dump and a copy of the store, taken before the deletion
    backup = tmp_path / "before.dump"
    dump(database_url, backup)
    root = raw_store.root
    copy = tmp_path / "store-copy"
    shutil.copytree(root, copy)
    # When the file is deleted and purged, the keyring gets a new key, every live key is rotated to it, and the old
    # key is retired
    assert old.call("DELETE", f"/api/v1/files/{deleted}", ALEX).status_code == 204
    old.run_jobs()
    assert old.row(deleted) is None
    rotating = make_lethe(**{"journal.enabled": "false", "file.keyring": f"{keyring_entry('test-2')},{TEST_KEYRING}"})
    assert keys.rotate(rotating.rt).left == {}
    retired = make_lethe(**{"journal.enabled": "false", "file.keyring": keyring_entry("test-2")})
    assert retired.call("GET", f"/api/v1/files/{live}/content", ALEX).data == b"a file that stays" * 40
    for made in (old, rotating, retired):
        made.close()
    # ...and both copies are restored, without the journal
    restore_dump(database_url, backup)
    shutil.rmtree(root)
    shutil.copytree(copy, root)
    after = Lethe(
        database_url, raw_store, old.clock, **{"journal.enabled": "false", "file.keyring": keyring_entry("test-2")}
    )
    try:
        row = after.row(deleted)
        assert row is not None and row.deleted_at is None  # the restored database knows nothing of the deletion
        # Then the roles refuse to start, naming the retired key...
        problem_found = keyring_problem(after.cfg)
        assert problem_found is not None and "test-1" in str(problem_found)
        # ...and whatever serves from it anyway never serves the file's plaintext
        answer = after.call("GET", f"/api/v1/files/{deleted}/content", ALEX)
        assert answer.status_code == 503 and answer.json["reason"] == "key_unavailable"
        stored = raw_store.get(row.object_key)
        assert not leaks(secret, stored)  # the restored store copy holds ciphertext only
        assert opened_by_nothing(after, deleted, stored, len(secret))  # and no key Lethe holds opens it
        # (the retired key, put back, would: that is why a retired key never comes back)
        unretired = Lethe(
            database_url, raw_store, old.clock, **{"journal.enabled": "false", "file.keyring": TEST_KEYRING}
        )
        try:
            assert not opened_by_nothing(unretired, deleted, stored, len(secret))
        finally:
            unretired.close()
    finally:
        after.close()
