"""One conformance suite for every ObjectStore driver (D4; STYLE.md: Warehouse tests every backend
against its interface). Runs against fs in a temporary directory and s3 on moto's server."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.ends import Clearance, Keep, Reach
from app.domain.keys import original_key, part_key, variant_key
from app.domain.objects import FileObjects
from app.errors import InvalidKey, NotFound, ObjectFailed, StorageError, StoreCallInTransaction
from app.storage.base import MultipartRef
from app.storage.files import FileStore
from tests.support.faults import RefusingS3
from tests.support.stores import make_s3_store, uploads_left, versions_of

MiB = 1024 * 1024


def a_key() -> str:
    return original_key(uuid.uuid4())


def test_put_then_get_head_and_open(store):
    key = a_key()
    store.put(key, b"hello world", 11)
    assert store.get(key) == b"hello world"
    assert store.head(key).size_bytes == 11
    chunks = store.open(key)
    assert b"".join(chunks) == b"hello world"


def test_put_from_a_stream_and_overwrite(store):
    key = a_key()
    store.put(key, io.BytesIO(b"first"), 5)
    store.put(key, io.BytesIO(b"second!"), 7)
    assert store.get(key) == b"second!"


def test_get_and_open_of_a_missing_key_are_not_found(store):
    with pytest.raises(NotFound):
        store.get(a_key())
    with pytest.raises(NotFound):
        store.open(a_key())
    assert store.head(a_key()) is None


def test_delete_already_gone(store):
    key = a_key()
    store.delete(key)  # never existed
    store.put(key, b"x", 1)
    store.delete(key)
    store.delete(key)  # again
    assert store.head(key) is None


def test_delete_many_with_missing_keys(store):
    file_id = uuid.uuid4()
    present = [original_key(file_id, 1), variant_key(file_id, "thumb-small")]
    missing = [original_key(file_id, 2), variant_key(file_id, "poster"), a_key()]
    for key in present:
        store.put(key, b"data", 4)
    store.delete_many(present + missing)
    for key in present + missing:
        assert store.head(key) is None


def test_delete_many_crosses_the_batch_limit(store, raw_store):
    keys = [original_key(uuid.uuid4()) for _ in range(1005)]
    for key in keys[:3] + keys[-3:]:
        store.put(key, b"d", 1)
    batches: list[int] = []
    if raw_store.driver == "s3":  # record every DeleteObjects request the driver sends
        original = raw_store.client._delete_objects
        raw_store.client._delete_objects = lambda bucket, objects, **kw: (
            batches.append(len(objects)) or original(bucket, objects, **kw)
        )
    try:
        assert store.delete_many(iter(keys)) == []  # a generator, as callers pass them
    finally:
        vars(raw_store.client).pop("_delete_objects", None) if raw_store.driver == "s3" else None
    assert all(store.head(key) is None for key in keys[:3] + keys[-3:])
    if raw_store.driver == "s3":
        assert batches and max(batches) <= 1000  # the S3 DeleteObjects limit
        if not raw_store.keeps_versions():
            assert batches == [1000, 5]  # every key sent, none twice


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "/etc/passwd",
        "f/../../etc/passwd",
        "f/./x",
        "f//x",
        "f/x/",
        "..",
        "f/x\\..\\y",
        "f/x\x00y",
    ],
)
def test_malformed_keys_are_rejected_before_any_io(store, bad):
    for call in (
        lambda: store.put(bad, b"x", 1),
        lambda: store.get(bad),
        lambda: store.head(bad),
        lambda: store.delete(bad),
        lambda: store.delete_many([a_key(), bad]),
    ):
        with pytest.raises(InvalidKey):
            call()


def test_a_segment_from_a_client_may_not_carry_a_separator():
    from app.domain.keys import KeySchemaError, validate_segment

    with pytest.raises(KeySchemaError):
        validate_segment("a/b")
    with pytest.raises(KeySchemaError):
        validate_segment("..")
    assert validate_segment("thumb-small") == "thumb-small"


def test_multipart_upload_assembles_parts_in_order(store):
    file_id = uuid.uuid4()
    key = original_key(file_id)
    first, second = os.urandom(5 * MiB), b"tail"
    ref = store.begin_upload(str(file_id), key, "application/octet-stream")
    # Parts may arrive out of order.
    part2 = store.put_part(ref, 2, second)
    part1 = store.put_part(ref, 1, first)
    info = store.complete_upload(ref, [part2, part1])
    assert info.size_bytes == len(first) + len(second)
    assert store.get(key) == first + second
    assert store.head(part_key(file_id, 1)) is None
    # Aborting a finished upload is a no-op.
    store.abort_upload(ref, 2)
    assert store.get(key) == first + second


def test_abort_upload_is_idempotent_and_drops_the_parts(store, raw_store):
    file_id = uuid.uuid4()
    key = original_key(file_id)
    ref = store.begin_upload(str(file_id), key, "application/octet-stream")
    store.put_part(ref, 1, b"part one")
    if raw_store.driver == "fs":
        assert store.head(part_key(file_id, 1)).size_bytes == 8
    else:
        listed = raw_store.client._list_multipart_uploads(raw_store.bucket, prefix=key)
        assert [upload.upload_id for upload in listed.uploads] == [ref.upload_id]
    store.abort_upload(ref, 3)
    store.abort_upload(ref, 3)
    assert store.head(key) is None
    if raw_store.driver == "fs":
        assert store.head(part_key(file_id, 1)) is None
    else:
        # The server no longer lists the upload (a test may list; the service never does, K2).
        result = raw_store.client._list_multipart_uploads(raw_store.bucket, prefix=key)
        assert [upload.upload_id for upload in result.uploads] == []


def test_the_removal_of_an_ended_upload_leaves_no_part_nor_upload_and_is_idempotent(store, raw_store):
    # Given a part written into an upload that ended meanwhile (on S3 a part uploaded while an abort runs can
    # still succeed and keep its bytes in the upload: AWS says to abort again)
    file_id = uuid.uuid4()
    ref = store.begin_upload(str(file_id), original_key(file_id), "application/octet-stream")
    store.put_part(ref, 1, b"orphan part")
    objects = FileObjects(file_id, original_key(file_id), upload_id=ref.upload_id, part_count=1, parts_open=True)
    # When the one rule freed the file and its objects are removed through the facade, twice
    for _ in range(2):
        assert FileStore(store).remove(Clearance(Reach.FILE, frozenset({file_id})), [objects]).refused == {}
    # Then neither its object (fs) nor its multipart upload (S3) is left
    assert versions_of(raw_store, [part_key(file_id, 1)]) == []
    assert uploads_left(raw_store, original_key(file_id)) == []


def test_a_clearance_that_keeps_a_file_removes_nothing_of_it(store, raw_store):
    # Given an upload with a part and a stored object of the same file
    file_id = uuid.uuid4()
    ref = store.begin_upload(str(file_id), original_key(file_id, 2), "application/octet-stream")
    store.put_part(ref, 1, b"held part")
    store.put(original_key(file_id), b"held original", 13)
    objects = FileObjects(file_id, original_key(file_id, 2), upload_id=ref.upload_id, part_count=1, parts_open=True)
    # When the rule keeps the file (a legal hold), every removal of the facade is asked
    kept = Clearance(Reach.FILE, frozenset(), {file_id: Keep.HELD})
    assert FileStore(store).remove(kept, [objects]).refused == {}
    assert FileStore(store).remove_keys(kept, {file_id: [original_key(file_id)]}) == []
    assert FileStore(store).abort_uploads(kept, {file_id: [ref]}) == 0
    # Then every byte stays: the object, and the part (its object on fs, its multipart upload on S3)
    assert store.get(original_key(file_id)) == b"held original"
    if raw_store.driver == "fs":
        assert store.get(part_key(file_id, 1)) == b"held part"
    else:
        assert uploads_left(raw_store, original_key(file_id, 2)) == [ref.upload_id]
    store.abort_upload(ref, 1)


def test_strays_after_a_completion_go_and_the_object_stays(store, raw_store):
    file_id = uuid.uuid4()
    key = original_key(file_id)
    ref = store.begin_upload(str(file_id), key, "application/octet-stream")
    part = store.put_part(ref, 1, b"assembled")
    store.complete_upload(ref, [part])
    if raw_store.driver == "fs":
        store.put_part(ref, 1, b"a late part")  # landed after the assembly dropped the parts
    strays = {file_id: store.part_keys(str(file_id), 1)}  # S3: none, no part can join a completed upload
    for _ in range(2):
        assert FileStore(store).remove_keys(Clearance(Reach.STRAY, frozenset({file_id})), strays) == []
    assert versions_of(raw_store, [part_key(file_id, 1)]) == []
    assert store.get(key) == b"assembled"


def test_the_facade_never_deletes_another_files_key_nor_a_file_key_as_unmanaged(store, raw_store):
    mine, other = uuid.uuid4(), uuid.uuid4()
    store.put(original_key(other), b"not mine", 8)
    refused = FileStore(store).remove_keys(Clearance(Reach.FILE, frozenset({mine})), {mine: [original_key(other)]})
    assert [failure.code for failure in refused] == ["not_its_key"]
    assert [failure.code for failure in FileStore(store).remove_unmanaged([original_key(other)])] == ["file_key"]
    assert store.get(original_key(other)) == b"not mine"


def test_abort_of_an_unknown_upload_succeeds(store, raw_store):
    file_id = uuid.uuid4()
    unknown = None if raw_store.driver == "fs" else "bm90LWFuLXVwbG9hZA"
    store.abort_upload(MultipartRef(str(file_id), original_key(file_id), unknown), 4)


def test_store_calls_inside_a_unit_of_work_raise(store, db):
    """D4 K1: no object store call runs inside a database transaction."""
    key = a_key()
    with pytest.raises(StoreCallInTransaction):
        db.unit_of_work(lambda uow: store.put(key, b"x", 1), name="test.k1")
    with pytest.raises(StoreCallInTransaction):
        db.unit_of_work(lambda uow: store.delete(key), name="test.k1")
    assert store.head(key) is None  # outside a transaction the same call is fine


def test_check_passes_on_a_reachable_store(store):
    store.check()


# -- fs only: links, directories, the temporary area ---------------------------------------------------------


@pytest.fixture
def fs_store(tmp_path):
    from app.storage.fs import FsStore

    return FsStore(str(tmp_path / "root"))


@pytest.fixture
def outside(tmp_path):
    directory = tmp_path / "outside"
    directory.mkdir()
    canary = directory / "canary"
    canary.write_bytes(b"must survive")
    return directory


def test_fs_never_follows_a_directory_link_out_of_its_root(fs_store, outside):
    file_id = uuid.uuid4()
    key = original_key(file_id)
    # A link placed in the root where the key's first directory would be.
    os.symlink(outside, os.path.join(fs_store.root, "f"))
    with pytest.raises(StorageError):
        fs_store.put(key, b"x", 1)
    with pytest.raises(StorageError):
        fs_store.delete(key)
    with pytest.raises(StorageError):
        fs_store.get(key)
    assert sorted(os.listdir(outside)) == ["canary"]
    assert (outside / "canary").read_bytes() == b"must survive"


def test_fs_removes_a_link_at_a_key_as_an_entry(fs_store, outside):
    key = a_key()
    fs_store.put(key, b"x", 1)
    path = os.path.join(fs_store.root, *key.split("/"))
    os.unlink(path)
    os.symlink(outside / "canary", path)
    with pytest.raises(StorageError):
        fs_store.get(key)  # reading does not follow it
    fs_store.delete(key)  # deleting removes the link, not its target
    assert not os.path.lexists(path)
    assert (outside / "canary").read_bytes() == b"must survive"


def test_fs_removes_a_files_emptied_directory_and_keeps_the_fan_out(fs_store):
    one, two = uuid.UUID("abcd0000-0000-4000-8000-000000000001"), uuid.UUID("abcd0000-0000-4000-8000-000000000002")
    fs_store.put(original_key(one), b"1", 1)
    fs_store.put(variant_key(one, "preview"), b"p", 1)
    fs_store.put(original_key(two), b"2", 1)
    fs_store.delete(original_key(one))
    assert os.path.isdir(os.path.join(fs_store.root, "f", "ab", "cd", str(one)))  # the variant is still there
    fs_store.delete_many([variant_key(one, "preview"), variant_key(one, "poster")])
    assert not os.path.exists(os.path.join(fs_store.root, "f", "ab", "cd", str(one)))
    assert os.path.isdir(os.path.join(fs_store.root, "f", "ab", "cd", str(two)))
    fs_store.delete(original_key(two))
    assert os.listdir(os.path.join(fs_store.root, "f", "ab", "cd")) == []  # the fan-out stays
    fs_store.put(part_key(one, 1), b"x", 1)
    fs_store.delete(part_key(one, 1))
    assert os.listdir(os.path.join(fs_store.root, "uploads")) == []


def test_fs_put_leaves_nothing_in_tmp(fs_store):
    fs_store.put(a_key(), b"payload", 7)
    with pytest.raises(StorageError):
        fs_store.put(a_key(), io.BytesIO(b"short"), 10)  # the stream ends early
    assert os.listdir(os.path.join(fs_store.root, ".tmp")) == []


def test_fs_tmp_is_not_a_key(fs_store):
    with pytest.raises(InvalidKey):
        fs_store.put(".tmp/x", b"x", 1)


def test_fs_sweep_tmp_removes_old_entries_and_never_follows_links(fs_store, outside):
    tmp = os.path.join(fs_store.root, ".tmp")
    old_file, new_file, link = (os.path.join(tmp, name) for name in ("put-old", "put-new", "put-link"))
    with open(old_file, "wb") as handle:
        handle.write(b"stale")
    with open(new_file, "wb") as handle:
        handle.write(b"in progress")
    os.symlink(outside, link)
    long_ago = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
    os.utime(old_file, (long_ago, long_ago))
    os.utime(link, (long_ago, long_ago), follow_symlinks=False)
    removed = fs_store.sweep_tmp(older_than=datetime.now(UTC) - timedelta(hours=1))
    assert removed == 2
    assert sorted(os.listdir(tmp)) == ["put-new"]
    assert sorted(os.listdir(outside)) == ["canary"]


def test_fs_sweep_tmp_passes_over_an_entry_gone_meanwhile(fs_store, monkeypatch):
    """A put finishes (its temporary file renamed into place) between the sweep's read of `.tmp` and its look at
    the entry: the sweep goes on; it raised FileNotFoundError out of the cleanup (a traceback in the worker)."""
    tmp = os.path.join(fs_store.root, ".tmp")
    long_ago = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
    for name in ("put-finished", "put-stale"):
        with open(os.path.join(tmp, name), "wb") as handle:
            handle.write(b"x")
        os.utime(os.path.join(tmp, name), (long_ago, long_ago))
    real_scandir = os.scandir

    @contextlib.contextmanager
    def racing_scandir(path):
        with real_scandir(path) as entries:

            def read():
                for entry in entries:
                    if entry.name == "put-finished":
                        os.unlink(entry.path)  # the put's rename, after the directory was read
                    yield entry

            yield read()

    monkeypatch.setattr(os, "scandir", racing_scandir)
    removed = fs_store.sweep_tmp(older_than=datetime.now(UTC) - timedelta(hours=1))
    assert removed == 1
    assert os.listdir(tmp) == []


def test_fs_sweep_tmp_reports_an_unreadable_area_as_a_storage_error(fs_store):
    """What the cleanup catches and reports as the step's error, never a bare OSError (a traceback)."""
    shutil.rmtree(os.path.join(fs_store.root, ".tmp"))
    with pytest.raises(StorageError):
        fs_store.sweep_tmp(older_than=datetime.now(UTC))


# -- deletes leave nothing, on plain and versioned buckets (issue 9 finding 1) ----------------------------------


def file_keys(file_id) -> list[str]:
    return [original_key(file_id, 1), original_key(file_id, 2), variant_key(file_id, "preview")]


def test_delete_and_delete_many_leave_no_version(store, raw_store):
    file_id = uuid.uuid4()
    keys = file_keys(file_id)
    for key in keys:
        store.put(key, b"first", 5)
    store.put(keys[0], b"second", 6)  # an overwrite: a noncurrent version on a versioned bucket
    store.delete(keys[0])
    assert versions_of(raw_store, keys[:1]) == []
    assert store.delete_many(keys + [a_key()]) == []
    assert versions_of(raw_store, keys) == []


def test_orig_1_does_not_take_orig_10(store, raw_store):
    file_id = uuid.uuid4()
    store.put(original_key(file_id, 1), b"one", 3)
    store.put(original_key(file_id, 10), b"ten", 3)
    store.delete_many([original_key(file_id, 1)])
    assert store.get(original_key(file_id, 10)) == b"ten"


def test_abort_and_complete_leave_no_version_of_the_parts(store, raw_store):
    file_id = uuid.uuid4()
    key = original_key(file_id)
    ref = store.begin_upload(str(file_id), key, "application/octet-stream")
    store.put_part(ref, 1, b"part one")
    store.abort_upload(ref, 1)
    assert versions_of(raw_store, [key, part_key(file_id, 1)]) == []
    other = uuid.uuid4()
    key = original_key(other)
    ref = store.begin_upload(str(other), key, "application/octet-stream")
    part = store.put_part(ref, 1, b"whole")
    store.complete_upload(ref, [part])
    store.delete_many(file_keys(other))
    assert versions_of(raw_store, file_keys(other) + [part_key(other, 1)]) == []


def test_versioning_turned_on_while_running_is_met_by_the_next_delete(moto_server):
    """The driver reads versioning at start and every minute; a delete in between that meets a delete
    marker removes every version of those keys at once."""
    from minio.commonconfig import ENABLED
    from minio.versioningconfig import VersioningConfig

    store = make_s3_store(moto_server)
    assert store.describe()["versioning"] == "off" and not store.keeps_versions()
    store.client.set_bucket_versioning(store.bucket, VersioningConfig(ENABLED))
    keys = file_keys(uuid.uuid4())
    for key in keys:
        store.put(key, b"bytes", 5)
        store.put(key, b"bytes2", 6)
    assert store.delete_many(keys) == []
    assert versions_of(store, keys) == []
    assert store.keeps_versions()


@pytest.mark.parametrize("versioning", ["Enabled", "Suspended"])
def test_describe_reads_versioning_and_object_lock(moto_server, versioning):
    from minio.versioningconfig import VersioningConfig

    store = make_s3_store(moto_server)
    store.client.set_bucket_versioning(store.bucket, VersioningConfig(versioning))
    assert store.describe() == {"driver": "s3", "versioning": versioning.lower(), "object_lock": "off"}
    assert store.keeps_versions()
    locked = f"lethe-locked-{uuid.uuid4().hex[:8]}"
    store.client.make_bucket(locked, object_lock=True)
    assert make_s3_store(moto_server, bucket=locked).describe()["object_lock"] == "enabled"


# -- one refused object fails only its keys (issue 9 finding 2) --------------------------------------------------


def test_fs_a_file_whose_directory_is_a_plain_file_fails_alone(fs_store):
    poisoned, healthy = uuid.uuid4(), uuid.uuid4()
    for file_id in (poisoned, healthy):
        fs_store.put(original_key(file_id), b"x", 1)
    directory = os.path.join(fs_store.root, *original_key(poisoned).split("/")[:-1])
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)
    with open(directory, "wb") as handle:
        handle.write(b"not a directory")
    failures = fs_store.delete_many(file_keys(poisoned) + file_keys(healthy))
    assert sorted(f.key for f in failures) == sorted(file_keys(poisoned))
    assert {f.code for f in failures} == {"ENOTDIR"}
    assert fs_store.head(original_key(healthy)) is None
    with pytest.raises(ObjectFailed):
        fs_store.delete(original_key(poisoned))


def test_fs_a_store_wide_error_raises(fs_store, monkeypatch):
    import errno as errno_module

    def read_only(*args, **kwargs):
        raise OSError(errno_module.EROFS, "Read-only file system")

    key = a_key()
    fs_store.put(key, b"x", 1)
    monkeypatch.setattr(os, "unlink", read_only)
    with pytest.raises(StorageError) as raised:
        fs_store.delete_many([key])
    assert not isinstance(raised.value, ObjectFailed)


@pytest.mark.parametrize("versioned", [False, True])
def test_s3_access_denied_for_one_key_fails_that_key_only(moto_server, versioned):
    store = make_s3_store(moto_server, versioned=versioned)
    poisoned, healthy = uuid.uuid4(), uuid.uuid4()
    for file_id in (poisoned, healthy):
        store.put(original_key(file_id), b"x", 1)
    fault = RefusingS3(store, {original_key(poisoned)})
    failures = store.delete_many(file_keys(poisoned) + file_keys(healthy))
    assert [(f.key, f.code) for f in failures] == [(original_key(poisoned), "AccessDenied")]
    assert versions_of(store, file_keys(healthy)) == []
    fault.heal()
    assert store.delete_many(file_keys(poisoned)) == []
    assert versions_of(store, file_keys(poisoned)) == []


def test_s3_a_store_wide_code_raises(moto_server):
    store = make_s3_store(moto_server)
    key = a_key()
    store.put(key, b"x", 1)
    RefusingS3(store, {key}, code="InternalError")
    with pytest.raises(StorageError) as raised:
        store.delete_many([key])
    assert not isinstance(raised.value, ObjectFailed)


def test_part_keys_are_the_objects_parts_are_stored_under(store, raw_store):
    file_id = uuid.uuid4()
    ref = store.begin_upload(str(file_id), original_key(file_id), "application/octet-stream")
    store.put_part(ref, 1, b"one")
    store.put_part(ref, 2, b"two")
    keys = store.part_keys(str(file_id), 2)
    if raw_store.driver == "fs":
        assert keys == [part_key(file_id, 1), part_key(file_id, 2)] and all(store.head(key) for key in keys)
    else:
        assert keys == []  # parts belong to the multipart upload
    store.abort_upload(ref, 2)
