"""The fault drills' stage: Lethe's roles as real processes, each dependency behind a TcpProxy of ours.

A drill cuts (refuse) or stalls (blackhole) a proxy, measures what clients and operators see, heals it, and
checks that nothing was lost and that no role had to be restarted.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from app.db.conn import one
from app.domain.keys import original_key
from app.entry.token import mint_token
from app.entry.wiring import build_runtime
from app.lifecycle.deletion import mark_deleted
from app.platform import config
from app.storage.fs import FsStore
from tests.support.database import truncate_all
from tests.support.fakes import RecordingBroker
from tests.support.keyring import SEALED_ENV
from tests.support.ports import free_port
from tests.support.proxy import TcpProxy
from tests.support.roles import Role, purge_queues, start_api, wait_for_http, wait_for_output
from tests.support.stores import make_s3_store, originals_held

pytestmark = pytest.mark.faults
SECRET = "fault-drill-secret-of-sufficient-length-0123"
OWNER = uuid.UUID("00000000-0000-4000-8000-00000000f417")


def via(url: str, address: str) -> str:
    """The URL with its host and port replaced by a proxy's."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    netloc[-1] = address
    return urlunsplit(parts._replace(netloc="@".join(netloc)))


def host_port(url: str, default: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default


class Answer:
    def __init__(self, status: int, body, headers, seconds: float):
        self.status, self.body, self.headers, self.seconds = status, body, headers, seconds

    def __repr__(self) -> str:
        return f"<{self.status} in {self.seconds:.2f}s {self.body}>"


class Stage:
    """Roles, proxies and a direct runtime (the test's own view of the database and the store)."""

    def __init__(
        self,
        tmp: Path,
        database_url: str,
        broker_url: str,
        driver: str = "fs",
        s3_endpoint: str | None = None,
        **settings: str,
    ):
        self.tmp = tmp
        self.database_url = database_url
        self.driver = driver
        self.pg = TcpProxy(*host_port(database_url, 5432)).start()
        self.proxies = [self.pg]
        self.roles: list[Role] = []
        self.token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LETHE_DATABASE_URL": via(database_url, self.pg.address),
            "LETHE_BROKER_URL": broker_url,
            "LETHE_AUTH_JWT_SECRET": SECRET,
            "LETHE_API_PORT": str(free_port()),
            "LETHE_API_WORKERS": "1",
            "LETHE_WORKER_PROCESSES": "1",
            "LETHE_WORKER_THREADS": "2",
            "LETHE_OUTBOX_RELAY_INTERVAL": "1s",
            "LETHE_OUTBOX_RELAY_AGE": "1s",
            "LETHE_FILE_GC_INTERVAL": "2s",
            "LETHE_FILE_PURGE_RETRY_BASE": "1s",
            "LETHE_FILE_PURGE_RETRY_MAX": "2s",
            "LETHE_SCHEDULE_LEADER_TIMEOUT": "6s",
            "LETHE_FILE_STORAGE_DRIVER": driver,
            "LETHE_FILE_FS_ROOT": str(tmp / "objects"),
            "LETHE_LOG_LEVEL": "INFO",
            **SEALED_ENV,  # files are sealed under their own keys, as in a new installation
        }
        if driver == "s3":
            assert s3_endpoint is not None
            self.s3 = TcpProxy(*host_port("http://" + s3_endpoint, 80)).start()
            self.proxies.append(self.s3)
            self.raw_store = make_s3_store(s3_endpoint)
            self.env.update(
                {
                    "LETHE_FILE_S3_ENDPOINT": self.s3.address,
                    "LETHE_FILE_S3_BUCKET": self.raw_store.bucket,
                    "LETHE_FILE_S3_ACCESS_KEY": "testing",
                    "LETHE_FILE_S3_SECRET_KEY": "testing",
                    "LETHE_FILE_S3_REGION": "us-east-1",
                    "LETHE_FILE_S3_SECURE": "false",
                    "LETHE_FILE_PART_SIZE": "5MiB",
                }
            )
        else:
            self.raw_store = FsStore(str(tmp / "objects"))
        self.env.update(settings)
        direct = dict(self.env, LETHE_DATABASE_URL=database_url)
        direct.pop("PATH")
        if driver == "s3":
            assert s3_endpoint is not None
            direct["LETHE_FILE_S3_ENDPOINT"] = s3_endpoint
        self.rt = build_runtime(config.load(direct), RecordingBroker(), role="drill", store=self.raw_store)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.env['LETHE_API_PORT']}"

    # -- roles ----------------------------------------------------------------------------------------------

    def start(self, role: str, **env: str) -> Role:
        merged = dict(self.env, **env)
        merged.setdefault("LETHE_METRICS_PORT", str(free_port()))
        merged["PROMETHEUS_MULTIPROC_DIR"] = str(self.tmp / f"metrics-{role}-{len(self.roles)}")
        process = Role([role], merged, self.tmp / f"{role}-{len(self.roles)}.log")
        process.metrics_port = int(merged["LETHE_METRICS_PORT"])  # type: ignore[attr-defined]
        self.roles.append(process)
        return process

    def start_api(self) -> Role:
        """The api, started again on another port if another process took its port first (start_api)."""
        return start_api(lambda args, env: self.start(args[0]), self.env)

    def start_all(self) -> dict[str, Role]:
        worker, scheduler = self.start("worker"), self.start("scheduler")
        roles = {"api": self.start_api(), "worker": worker, "scheduler": scheduler}
        wait_for_http(self.base + "/readyz", roles["api"])
        wait_for_output(roles["worker"], '"event": "worker.started"')
        wait_for_output(roles["scheduler"], '"event": "scheduler.leader"')
        return roles

    def assert_alive(self) -> None:
        """No role was restarted or died: recovery happens inside the processes."""
        for role in self.roles:
            if role.proc.poll() is not None and role.proc.returncode != -signal.SIGKILL:
                raise AssertionError(f"a role exited with {role.proc.returncode}:\n{role.tail()}")

    def close(self) -> None:
        for role in self.roles:
            role.kill()
        for proxy in self.proxies:
            proxy.close()
        self.rt.close()

    # -- files ----------------------------------------------------------------------------------------------

    def seed(self, n: int) -> list[uuid.UUID]:
        """n complete, unattached files of OWNER, each with its original in the store (written directly)."""
        ids = [uuid.uuid4() for _ in range(n)]
        now = datetime.now(UTC)
        for file_id in ids:
            self.raw_store.put(original_key(file_id), b"x" * 32, 32)

        def insert(uow):
            with uow.conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key, "
                    "upload_state, scan_status, created_at, last_change_at) VALUES (%s, %s, 'attachment', "
                    "'drill.bin', 'application/octet-stream', 32, %s, 'complete', 'skipped', %s, %s)",
                    [(file_id, OWNER, original_key(file_id), now, now) for file_id in ids],
                )

        self.rt.db.unit_of_work(insert, name="drill.seed")
        return ids

    def mark_deleted(self, ids: list[uuid.UUID]) -> None:
        """Delete files the way the api does, in one transaction, without publishing (the purge is left to the
        relay and the catch-up: the drill's subject)."""
        self.rt.db.unit_of_work(
            lambda uow: mark_deleted(uow, sorted(ids), datetime.now(UTC), via="drill"), name="drill.delete"
        )

    def left(self, ids: list[uuid.UUID]) -> tuple[int, int]:
        """(rows, objects) of these files still present."""
        return self.rows_left(ids), self.objects_left(ids)

    def rows_left(self, ids: list[uuid.UUID]) -> int:
        """How many of these files still have their row: what the drills poll while the roles work."""
        return int(
            self.rt.db.read(
                lambda conn: one(conn.execute("SELECT count(*) AS n FROM files WHERE id = ANY(%s)", (ids,))).n
            )
        )

    def objects_left(self, ids: list[uuid.UUID]) -> int:
        """How many of these files' originals the store still holds, read by one listing of the files' prefix:
        a HEAD per file (2,000 of them at each poll) loaded the store and the machine the drill measures."""
        return len(originals_held(self.raw_store, ids))

    def wait_gone(self, ids: list[uuid.UUID], timeout: float) -> float:
        """Seconds until no row and no object of the files is left; fails after `timeout`."""
        start = time.monotonic()
        left: tuple[int, int] | str = "not read"
        while True:
            try:
                left = self.left(ids)
            except (psycopg.OperationalError, PoolTimeout) as exc:
                # The drill's own reader meets the outage it drives (a primary lost, its pool reconnecting
                # to the promoted standby): not an answer of the roles, so it reads again until the timeout.
                left = type(exc).__name__
            if left == (0, 0):
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise AssertionError(
                    f"{left} (rows, objects) still there after {timeout}s:\n"
                    + "\n".join(role.tail(3000) for role in self.roles)
                )
            time.sleep(0.2)

    # -- HTTP -----------------------------------------------------------------------------------------------

    def call(self, method: str, path: str, timeout: float = 30) -> Answer:
        request = urllib.request.Request(self.base + path, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        start = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read()
                return Answer(
                    response.status, json.loads(text) if text else None, response.headers, time.monotonic() - start
                )
        except urllib.error.HTTPError as exc:
            text = exc.read()
            return Answer(exc.code, json.loads(text) if text else None, exc.headers, time.monotonic() - start)

    def delete(self, file_id: uuid.UUID) -> Answer:
        """deleteFile; a request that takes over 10 s fails the drill (no answer may hang)."""
        return self.call("DELETE", f"/api/v1/files/{file_id}", timeout=10)

    def readyz(self) -> Answer:
        return self.call("GET", "/readyz")

    def until(self, what, timeout: float, step: float = 0.2):
        """Poll `what()` until it answers something true; returns (answer, seconds)."""
        start = time.monotonic()
        while True:
            answer = what()
            if answer:
                return answer, time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise AssertionError(f"not within {timeout}s:\n" + "\n".join(role.tail(3000) for role in self.roles))
            time.sleep(step)


def metric(port: int, name: str) -> float:
    """The sum of a metric's samples on a role's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def log_lines(role: Role) -> list[dict[str, Any]]:
    lines = []
    for line in role.output().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            lines.append({"raw": line})
    return lines


@pytest.fixture(autouse=True)
def _empty_database(database_url):
    """Every test of the roles starts on empty tables: the files an earlier test's `lethe dev` sealed under a
    keyring of its own would make these roles refuse to start (a key id their keyring lacks), as they must."""
    from tests.support.database import truncate_all

    truncate_all(database_url)


@pytest.fixture
def stage_factory(tmp_path, database_url, broker_url):
    """Build a Stage on empty tables and the drill's own queues; everything is killed at the end."""
    purge_queues(broker_url)
    truncate_all(database_url)
    stages = []

    def make(**kwargs) -> Stage:
        stage = Stage(tmp_path, database_url, broker_url, **kwargs)
        stages.append(stage)
        return stage

    yield make
    for stage in stages:
        stage.close()
