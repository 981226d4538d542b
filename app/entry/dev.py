"""`lethe dev`: the role `all` in one process, on embedded defaults (D1).

With nothing configured it starts an embedded PostgreSQL under `<state>/pg`, the fs driver under
`./.lethe/objects` (file.fs.root), an in-process broker with an in-process dramatiq worker, and the
scheduler; with database.url or broker.url set it uses those. It binds api.host (127.0.0.1 by default).
When no auth.jwt_secret is configured it makes one under `<state>/` and prints a token and a curl line.
Ctrl-C (or SIGTERM) stops everything it started.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import signal
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from app.platform.config import explicitly_set, with_changes
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from types import FrameType

    from app.platform.config.tree import Config
    from app.runtime import Runtime

log = logging.getLogger("lethe.dev")


# How long a job thread waits for a message before it looks again (dramatiq's default is a second): a Ctrl-C waits
# for the threads' looks, twice (job threads, then consumers), so lethe dev stops within a fraction of a second.
POLL_MS = 200


def _dev_secret(state: Path, name: str = "jwt_secret") -> str:
    """A secret of this folder's lethe dev (made once, 0600, kept across restarts)."""
    path = state / name
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def _dev_keyring(state: Path) -> str:
    """This folder's keyring (one key, made once, 0600, kept across restarts): make run seals every file."""
    from datetime import date

    from app.platform.keys import generate_entry

    path = state / KEYRING_FILE
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(generate_entry(f"dev-{date.today().isoformat()}"))
    return path.read_text().strip()


def _sealing(cfg: Config, state: Path) -> tuple[Config, Path | None]:
    """Whether this `lethe dev` seals new files, as the chart decides it: a new installation seals; an existing one
    keeps what it had (files and none sealed: it goes on without, as an upgrade from a release before per-file
    keys); file.encryption set by the operator wins. Says so in one line when it stays off. Returns the
    configuration and the keyring file it made (None: none made now)."""
    from app.db.files import sealing_in_use

    changes: dict[str, object] = {}
    made: Path | None = None
    if not explicitly_set("file.encryption"):
        import psycopg
        from psycopg.rows import namedtuple_row

        with psycopg.connect(cfg.database.url, autocommit=True, row_factory=namedtuple_row) as conn:
            holds_files, sealed = sealing_in_use(conn)
        seal = sealed or not holds_files
        changes["file.encryption"] = seal
        if not seal:
            print(
                "lethe dev: this installation's files are not sealed, so new files are not either (as an upgrade "
                "of the chart keeps the installed setting); LETHE_FILE_ENCRYPTION=on seals new ones.",
                flush=True,
            )
    if not cfg.file.keyring and changes.get("file.encryption", cfg.file.encryption):
        path = state / KEYRING_FILE
        if not path.exists():
            made = path
        changes["file.keyring"] = _dev_keyring(state)
    return (with_changes(cfg, changes) if changes else cfg), made


DEV_FILE = "dev.json"
KEYRING_FILE = "keyring"


def _port_free(host: str, port: int) -> bool:
    """Whether the api's port can be bound: checked before anything starts, so a taken port says how to pick
    another instead of werkzeug's generic exit."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def write_dev_file(state: Path, cfg: Config, api_url: str) -> Path:
    """Tell operator commands run from the same folder where this `lethe dev` keeps its data: the
    database URL, the fs root, the api's address and this process. Mode 0600, beside jwt_secret."""
    path = state / DEV_FILE
    tmp = state / (DEV_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(
            {
                "pid": os.getpid(),
                "database_url": cfg.database.url,
                "api_url": api_url,
                "fs_root": str(Path(cfg.file.fs.root).resolve()),
                "storage_driver": cfg.file.storage.driver,
            },
            handle,
        )
    os.replace(tmp, path)
    return path


def running_dev(state_dir: str = ".lethe") -> dict[str, Any] | None:
    """What a `lethe dev` running from this folder wrote, or None when none runs (no file, or its process
    is gone)."""
    path = Path(state_dir) / DEV_FILE
    try:
        facts = json.loads(path.read_text())
        os.kill(int(facts["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return facts if isinstance(facts, dict) else None


def as_the_running_dev(cfg: Config, state_dir: str = ".lethe") -> Config | None:
    """The configuration of the `lethe dev` running from this folder, for a command run beside it with no
    database.url of its own: its database and fs root (./.lethe/dev.json), the keyring it made for this folder's
    files (./.lethe/keyring) and its secret (./.lethe/jwt_secret), each unless the command's own configuration
    sets it. None when none runs."""
    dev = running_dev(state_dir)
    if dev is None:
        return None
    changes: dict[str, object] = {"database.url": dev["database_url"]}
    if "LETHE_FILE_FS_ROOT" not in os.environ and dev.get("storage_driver") == "fs":
        changes["file.fs.root"] = dev["fs_root"]
    keyring, secret = Path(state_dir) / KEYRING_FILE, Path(state_dir) / "jwt_secret"
    if not cfg.file.keyring and keyring.exists():
        changes["file.keyring"] = keyring.read_text().strip()
    if not cfg.auth.jwt_secret and not cfg.auth.jwt_public_key and secret.exists():
        changes["auth.jwt_secret"] = secret.read_text().strip()
    return with_changes(cfg, changes)


def _hold_dev_lock(state: Path) -> IO[str] | int | None:
    """One `lethe dev` per folder: an exclusive lock on `<state>/dev.lock`, held until the process
    ends (the kernel releases it even on a kill). Returns the open file, or the pid of the holder (None if it
    did not write it yet) when another process holds it."""
    import fcntl

    handle = open(state / "dev.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        text = handle.read().strip()
        handle.close()
        return int(text) if text.isdigit() else None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


class _AgainAfterTheFirstCleanup(logging.Handler):
    """Print the start-up banner once more after the last step of the first cleanup run logged its line."""

    def __init__(self, banner: str):
        super().__init__()
        self.banner, self.done = banner, False

    def emit(self, record: logging.LogRecord) -> None:
        if (
            not self.done
            and record.name == "lethe.cleanup"
            and getattr(record, "event", None) == "cleanup.step"
            and getattr(record, "step", None) == "n"
        ):
            self.done = True
            print(self.banner, flush=True)


def _clean_after_a_dead_dev(runtime: Runtime) -> None:
    """This folder's lock proves that no other `lethe dev` of this installation runs: what an earlier one left
    when it was stopped hard (a Ctrl-C in the middle of an upload) is freed at once. The write leases and
    completion leases of its uploads (the client's next PATCH would answer 409 until file.write_timeout), the
    partial writes in the fs driver's `.tmp`, and the directories its deletes left empty."""
    from app.db import sessions as sessions_sql
    from app.domain.keys import FILES_PREFIX, UPLOADS_PREFIX
    from app.platform.process import process_id

    freed = runtime.db.unit_of_work(
        lambda uow: sessions_sql.end_leases_not_of(uow.conn, process_id()), name="dev.end_leases"
    )
    partial = runtime.maintenance.sweep_tmp(runtime.clock.now() + timedelta(seconds=1))
    emptied = sum(runtime.maintenance.prune_dirs(prefix) for prefix in (FILES_PREFIX, UPLOADS_PREFIX))
    if freed or partial or emptied:
        log_event(
            log,
            "info",
            "dev.cleaned",
            "what the last lethe dev left when it stopped is cleaned",
            leases_ended=freed,
            partial_writes=partial,
            directories=emptied,
        )


def run_dev(port: int | None = None, state_dir: str = ".lethe") -> int:
    from apscheduler.schedulers.background import BackgroundScheduler
    from dramatiq import Worker
    from werkzeug.serving import make_server

    from app.api.app import create_app
    from app.db.migrate import SchemaTooNew, migrate, too_new
    from app.entry.embedded_pg import EmbeddedPostgres
    from app.entry.support import check_keyring_or_exit, inspect_store_or_exit, load_config_or_exit
    from app.entry.token import mint_token
    from app.entry.wiring import build_runtime
    from app.platform.jobs.broker import QUEUES, build_broker
    from app.platform.observability.log_setup import setup_logging
    from scheduler.jobs import register_jobs
    from workers.actors import register
    from workers.pools import add_webhook_pool, split_queues

    cfg = load_config_or_exit("dev")
    explicit_format = "LETHE_LOG_FORMAT" in os.environ
    setup_logging("all", cfg.log.format if explicit_format else "console", cfg.log.level)
    inspect_store_or_exit(cfg, "all")
    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    held = _hold_dev_lock(state)
    if held is None or isinstance(held, int):
        running = running_dev(state_dir)
        where = f" at {running['api_url']}" if running else ""
        print(
            f"lethe dev: another `make run` (lethe dev{'' if held is None else f', pid {held}'}) is already running "
            f"from this folder{where}, with the same database and files: use it, or stop it first (Ctrl-C in its "
            "terminal). A second one needs another folder.",
            file=sys.stderr,
        )
        return 2
    if not _port_free(cfg.api.host, port or cfg.api.port):
        print(
            f"lethe dev: port {port or cfg.api.port} on {cfg.api.host} is in use (api.port). Stop what uses it, "
            "or choose another port:  make run PORT=9000  (or lethe dev --port 9000)",
            file=sys.stderr,
        )
        return 2

    changes: dict[str, object] = {}
    embedded = None
    if not cfg.database.url:
        embedded = EmbeddedPostgres(state / "pg")
        changes["database.url"] = embedded.start()
        log_event(log, "info", "dev.postgres_started", "embedded PostgreSQL started", port=embedded.port)
    if not cfg.auth.jwt_secret and not cfg.auth.jwt_public_key:
        changes["auth.jwt_secret"] = _dev_secret(state)
    if not cfg.file.link_secret:
        changes["file.link_secret"] = _dev_secret(state, "link_secret")  # createFileLink works under make run
    if port:
        changes["api.port"] = port
    cfg = with_changes(cfg, changes) if changes else cfg

    stop = threading.Event()
    worker = scheduler = server = runtime = leadership = dev_file = None
    made_keyring: Path | None = None
    try:
        try:
            migrate(cfg.database.url)
        except SchemaTooNew as exc:
            print(f"lethe dev: database.url: {too_new(exc.unknown)}", file=sys.stderr)
            return 2
        cfg, made_keyring = _sealing(cfg, state)
        check_keyring_or_exit(cfg)  # a key this folder's files need must not have left the keyring (exit 2)
        if made_keyring is not None:
            print(
                f"lethe dev: every new file is sealed under a key of its own; the keyring is {made_keyring}: keep "
                "a copy (without it no sealed file opens).",
                flush=True,
            )
        broker = build_broker(cfg.broker.url, cfg.broker.queue_type)
        runtime = build_runtime(cfg, broker, role="all")
        _clean_after_a_dead_dev(runtime)
        register(broker, runtime)
        queues, pool = split_queues(QUEUES)
        if pool:
            add_webhook_pool(broker, cfg.webhooks.concurrency)  # webhook deliveries on threads of their own
        worker = Worker(broker, queues=queues, worker_threads=cfg.worker.threads, worker_timeout=POLL_MS)
        worker.start()
        scheduler = BackgroundScheduler(timezone=cfg.schedule.timezone)
        leadership = register_jobs(scheduler, runtime)
        scheduler.start()
        server = make_server(cfg.api.host, cfg.api.port, create_app(runtime), threaded=True)

        def shutdown(signum: int, frame: FrameType | None) -> None:
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

        signal.signal(signal.SIGINT, shutdown)
        signal.signal(signal.SIGTERM, shutdown)
        base = f"http://{cfg.api.host}:{server.server_port}"
        dev_file = write_dev_file(state, cfg, base)
        banner = f"\nLethe is up at {base}  (API docs: {base}/docs, OpenAPI: {base}/openapi.json)\n"
        if "auth.jwt_secret" in changes:
            user = uuid.uuid5(uuid.NAMESPACE_URL, "lethe-dev-user")
            token = mint_token(cfg.auth.jwt_secret, user, ("files:read", "files:write"))
            banner += (
                f"A development token for user {user} (12h):\n  export TOKEN={token}\n"
                f'  curl -H "Authorization: Bearer $TOKEN" {base}/api/v1/events\n'
            )
        banner += "Ctrl-C stops everything.\n"
        print(banner, flush=True)
        # The start-up cleanup logs a line per step right after: the banner comes again below them.
        logging.getLogger().addHandler(_AgainAfterTheFirstCleanup(banner))  # after the console's own handler
        server.serve_forever(poll_interval=0.1)  # a Ctrl-C is seen at once
    except SystemExit:
        if made_keyring is not None:  # refused before anything was sealed with it: nothing is left behind
            made_keyring.unlink(missing_ok=True)
        raise
    finally:
        if dev_file is not None:
            dev_file.unlink(missing_ok=True)
        if not isinstance(held, int) and held is not None:
            (state / "dev.lock").unlink(missing_ok=True)  # ours: nothing stale stays for the next start
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=False)
        if leadership is not None:
            leadership.release()
        if worker is not None:
            worker.stop(timeout=5000)
        if runtime is not None:
            runtime.close()
        if embedded is not None:
            embedded.stop()
        log_event(log, "info", "dev.stopped", "stopped")
    return 0
