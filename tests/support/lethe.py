"""A Lethe api in process on the real database and a real store, driven as people would drive it."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from app.api.app import create_app
from app.db.conn import one
from app.db.context import in_transaction
from app.entry.token import mint_token
from app.entry.wiring import build_runtime
from app.platform import config
from app.storage.guard import GuardedStore
from tests.support.fakes import RecordingBroker
from tests.support.keyring import SEALED_ENV

SECRET = "test-secret-for-hs256-tokens-0123456789"
LINK_SECRET = "link-secret-for-the-tests-0123456789abcdef"
FS_PART_SIZE = 1024
MOTO_PART_SIZE = 1024  # moto runs with S3_UPLOAD_PART_MIN_SIZE=1024 (tests/conftest.py)
S3_PART_SIZE = 5 * 1024 * 1024  # S3's own minimum: SeaweedFS, the real server


def person_id(email: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, "mailto:" + email)


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    scopes: tuple[str, ...] = ("files:read", "files:write")

    @property
    def id(self) -> uuid.UUID:
        return person_id(self.email)

    @property
    def headers(self) -> dict[str, Any]:
        return {"Authorization": "Bearer " + mint_token(SECRET, self.id, self.scopes)}


ALEX = Person("Alex", "alex@example.com")
SAM = Person("Sam", "sam@example.com")
ROBIN = Person("Robin", "robin@example.com")
OWNER = Person("Owner", "owner@example.com", ("files:read", "files:write", "manage"))


class Lethe:
    def __init__(self, database_url: str, raw_store, clock, journal_writes: str = "manual", others=None, **settings):
        """`others`: further stores by name (raw drivers, as raw_store), declared in file.stores; raw_store is the
        store named default."""
        self.driver = raw_store.driver
        moto = getattr(raw_store, "test_server", None) == "moto"
        self.part_size = FS_PART_SIZE if self.driver == "fs" else MOTO_PART_SIZE if moto else S3_PART_SIZE
        env = {
            "LETHE_DATABASE_URL": database_url,
            "LETHE_AUTH_JWT_SECRET": SECRET,
            "LETHE_FILE_LINK_SECRET": LINK_SECRET,
            "LETHE_FILE_PART_SIZE": str(self.part_size),
            "LETHE_FILE_MAX_SIZE": str(64 * 1024 * 1024),
            "LETHE_FILE_STORAGE_DRIVER": self.driver,
            "LETHE_FILE_S3_ENDPOINT": "unused:1",
            "LETHE_DATABASE_POOL_SIZE": "8",
            **SEALED_ENV,  # files are sealed under their own keys, as in a new installation
        }
        if others:
            # Declared for the configuration's checks; the stores themselves are the test's (`others` below).
            env["LETHE_FILE_STORES"] = json.dumps(
                {name: {"driver": "fs", "root": f"/nonexistent/{name}"} for name in others}
            )
        env.update({config.KEYS_BY_NAME[name].env: str(value) for name, value in settings.items()})
        self.cfg = _load(env, smallest_part=self.part_size)
        self.broker = RecordingBroker()
        self.retried: list[Any] = []
        self.raw_store = raw_store
        self.store = GuardedStore(raw_store, in_transaction)
        self.clock = clock
        self.rt = build_runtime(
            self.cfg,
            self.broker,
            role="api",
            clock=clock,
            store=self.store,
            journal_writes=journal_writes,
            others={name: GuardedStore(raw, in_transaction) for name, raw in (others or {}).items()},
        )
        self.app = create_app(self.rt)
        self.client = self.app.test_client()

    def close(self):
        self.rt.close()

    def use_primary(self, name: str) -> None:
        """Send new files to the store of this name (file.store.primary), as a rollout with it set would."""
        stores = {self.rt.primary: self.rt.store, **self.rt.others}
        self.cfg = _lowered(self.part_size, lambda: config.with_changes(self.cfg, {"file.store.primary": name}))
        self.rt.cfg = self.cfg
        self.rt.store = stores.pop(name)
        self.rt.others = stores

    # -- HTTP as a person -----------------------------------------------------------------------------------

    def call(self, method: str, path: str, person: Person | None = None, **kwargs):
        headers = dict(kwargs.pop("headers", {}))
        if person is not None:
            headers.update(person.headers)
        return self.client.open(path, method=method, headers=headers, **kwargs)

    def start_upload(self, person: Person, data: bytes, name: str = "notes.txt", **fields):
        body = {"name": name, "size_bytes": len(data), "mime_type": "text/plain", **fields}
        response = self.call("POST", "/api/v1/uploads", person, json=body)
        assert response.status_code == 201, response.json
        return response.json

    def send_parts(self, person: Person, file_id: str, data: bytes, part_size: int):
        for index, start in enumerate(range(0, max(len(data), 1), part_size), start=1):
            response = self.call(
                "PUT",
                f"/api/v1/uploads/{file_id}/parts/{index}",
                person,
                data=data[start : start + part_size],
                headers={"Content-Type": "application/octet-stream"},
            )
            assert response.status_code == 200, response.json

    def upload(
        self, person: Person, data: bytes = b"hello lethe", name: str = "notes.txt", scan: bool = True, **fields
    ) -> str:
        """Upload, complete and (by default) scan a file; returns its id."""
        created = self.start_upload(person, data, name, **fields)
        file_id = created["file"]["id"]
        self.send_parts(person, file_id, data, created["upload"]["part_size"])
        response = self.call("POST", f"/api/v1/uploads/{file_id}/complete", person)
        assert response.status_code == 200, response.json
        if scan:
            self.run_jobs("scan_file")
        return file_id

    # -- jobs -----------------------------------------------------------------------------------------------

    def run_jobs(self, actor_name: str | None = None) -> int:
        """Run the published jobs (of one actor, or all) by calling the actor functions directly. A job that
        asks to come back later (dramatiq.Retry, as a webhook delivery does) is kept in `retried`, as dramatiq
        keeps it for its delay; `run_retried()` runs those once (after the test moved its clock)."""
        import dramatiq

        from workers.actors import ACTORS

        ran = 0
        while True:
            messages = self.broker.take(actor_name)
            if not messages:
                return ran
            for message in messages:
                try:
                    ACTORS[message.actor_name].fn(self.rt, *message.args)
                except dramatiq.Retry:
                    self.retried.append(message)
                ran += 1

    def run_retried(self) -> int:
        """Run the jobs that asked to come back once more (each may ask again)."""
        import dramatiq

        from workers.actors import ACTORS

        waiting, self.retried = self.retried, []
        for message in waiting:
            try:
                ACTORS[message.actor_name].fn(self.rt, *message.args)
            except dramatiq.Retry:
                self.retried.append(message)
        return len(waiting)

    def row(self, file_id):
        return self.rt.db.read(lambda conn: conn.execute("SELECT * FROM files WHERE id = %s", (file_id,)).fetchone())

    def file_row(self, file_id):
        from app.db import files as files_sql

        return self.rt.db.read(lambda conn: files_sql.file_by_id(conn, uuid.UUID(str(file_id))))

    def stored(self, file_id, variant: str | None = None) -> bytes:
        """What the store holds of a file's original (or a variant), opened as a reader gets it: sealed files
        through their key (the raw objects are ciphertext: raw_store shows them as they are)."""
        row = self.file_row(file_id)
        size = 0
        if variant is not None:
            size = next(
                thumb
                for thumb in self.rt.db.read(
                    lambda conn: conn.execute(
                        "SELECT size_bytes FROM file_variants WHERE file_id = %s AND name = %s", (row.id, variant)
                    ).fetchall()
                )
            )[0]
        chunks = self.rt.files.read(row, variant=variant, variant_size=size)
        try:
            return b"".join(chunks)
        finally:
            chunks.close()

    def tail(self, file_id) -> bytes:
        """The bytes a tus upload's tail holds, opened (b"" when missing)."""
        row = self.file_row(file_id)
        session = self.rt.db.read(
            lambda conn: one(
                conn.execute(
                    "SELECT (SELECT count(*) FROM upload_parts p WHERE p.file_id = s.file_id) AS parts "
                    "FROM upload_sessions s WHERE s.file_id = %s",
                    (row.id,),
                )
            )
        )
        return self.rt.files.read_tail(row, session.parts + 1)


def _load(env: dict[str, Any], smallest_part: int):
    """The configuration, with S3's part-size minimum lowered to what the test's server takes (moto: 1 KiB)."""
    return _lowered(smallest_part, lambda: config.load(env))


def _lowered(smallest_part: int, loaded: Any) -> Any:
    import importlib

    loading: Any = importlib.import_module("app.platform.config.load")  # the module (the package exports load())

    real = loading.S3_MIN_PART_SIZE
    loading.S3_MIN_PART_SIZE = min(real, smallest_part)
    try:
        return loaded()
    finally:
        loading.S3_MIN_PART_SIZE = real


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
