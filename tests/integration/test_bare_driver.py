"""A store driver with nothing but the nine operations of the driver's contract carries a file through all of
Lethe: its parts are objects of their own, the completion assembles and hashes them, reads and ranges stream,
the deletion leaves nothing, direct transfers are refused. Over fs and over an S3 bucket, each driver stripped
of its capabilities, as a new driver would start."""

from __future__ import annotations

import inspect
import os

import pytest

from app.domain.keys import part_key
from app.storage.base import (
    Driver,
    LocalFiles,
    NativeMultipart,
    Presigning,
    ReportedMd5,
    ScratchArea,
    Versions,
)
from app.storage.fs import FsStore
from app.storage.s3 import S3Store
from tests.support.database import truncate_all
from tests.support.helpers import problem
from tests.support.lethe import ALEX, Lethe
from tests.support.stores import make_s3_store

CAPABILITIES = (NativeMultipart, Presigning, LocalFiles, ReportedMd5, Versions, ScratchArea)


class Bare:
    """A driver's nine operations and nothing else."""

    def __init__(self, inner):
        self._inner = inner
        self.driver = inner.driver
        self.test_server = getattr(inner, "test_server", None)

    def put(self, key, data, length=None, content_type="application/octet-stream"):
        return self._inner.put(key, data, length, content_type)

    def open(self, key, first=0, length=None):
        return self._inner.open(key, first, length)

    def get(self, key):
        return self._inner.get(key)

    def head(self, key):
        return self._inner.head(key)

    def delete(self, key):
        return self._inner.delete(key)

    def delete_many(self, keys):
        return self._inner.delete_many(keys)

    def list_prefix(self, prefix, after=""):
        return self._inner.list_prefix(prefix, after)

    def check(self):
        return self._inner.check()

    def describe(self):
        return self._inner.describe()


def operations(protocol) -> set[str]:
    """The methods a protocol declares, its own and those of the protocols it extends."""
    return {
        name
        for cls in protocol.__mro__
        if cls.__module__ in ("app.storage.base", __name__)
        for name, member in vars(cls).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def test_the_contract_is_nine_operations_and_the_drivers_say_what_they_add():
    assert operations(Driver) == set(operations(Bare)) - {"__init__"} and len(operations(Driver)) == 9
    assert not any(isinstance(Bare(FsStore.__new__(FsStore)), capability) for capability in CAPABILITIES)
    fs = {c.__name__ for c in CAPABILITIES if all(hasattr(FsStore, name) for name in operations(c))}
    s3 = {c.__name__ for c in CAPABILITIES if all(hasattr(S3Store, name) for name in operations(c))}
    assert fs == {"LocalFiles", "ScratchArea"}
    assert s3 == {"NativeMultipart", "Presigning", "ReportedMd5", "Versions"}


@pytest.fixture(params=["fs", "moto"])
def bare(request, tmp_path, database_url, clock):
    truncate_all(database_url)  # an earlier test's hold on Alex would keep every deleted file here
    if request.param == "fs":
        raw = FsStore(str(tmp_path / "objects"))
    else:
        raw = make_s3_store(request.getfixturevalue("moto_server"), versioned=False, server="moto")
    lethe = Lethe(database_url, Bare(raw), clock)
    yield lethe, raw
    lethe.close()


def test_a_bare_driver_takes_an_upload_serves_it_and_leaves_nothing_after_its_deletion(bare):
    lethe, raw = bare
    assert not lethe.store.supports_direct
    data = os.urandom(3 * lethe.part_size + 123)
    file_id = lethe.upload(ALEX, data, name="bare.bin", mime_type="application/octet-stream")
    row = lethe.file_row(file_id)
    assert row.scan_status in ("clean", "skipped") and row.size_bytes == len(data) and lethe.stored(file_id) == data
    assert all(raw.head(part_key(file_id, n)) is None for n in range(1, 5))  # the completion dropped the parts
    whole = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert whole.status_code == 200 and whole.data == data
    first, last = lethe.part_size - 7, 2 * lethe.part_size + 9  # a range across two parts' bytes
    ranged = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": f"bytes={first}-{last}"})
    assert ranged.status_code == 206 and ranged.data == data[first : last + 1]

    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    lethe.run_jobs("purge_objects")
    assert lethe.row(file_id) is None
    left = [listed.key for prefix in ("f/", "uploads/") for listed in raw.list_prefix(prefix) if file_id in listed.key]
    assert left == []


def test_a_bare_driver_refuses_direct_transfers_and_an_abandoned_upload_leaves_no_part(bare):
    lethe, raw = bare
    body = {"name": "direct.bin", "size_bytes": 10, "mime_type": "application/octet-stream", "transfer": "direct"}
    response = lethe.call("POST", "/api/v1/uploads", ALEX, json=body)
    problem(response, 422, "invalid_request", "direct_transfer_unavailable")

    created = lethe.start_upload(ALEX, b"x" * (2 * lethe.part_size), name="abandoned.bin")
    file_id = created["file"]["id"]
    lethe.call(
        "PUT",
        f"/api/v1/uploads/{file_id}/parts/1",
        ALEX,
        data=b"x" * lethe.part_size,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert raw.head(part_key(file_id, 1)) is not None  # a part is an object of its own
    assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX).status_code == 204
    lethe.run_jobs()
    assert raw.head(part_key(file_id, 1)) is None
