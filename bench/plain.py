"""The plainest stack that does deleteFile's and getFile's work, for `bench/http.py --plain`. Not a test.

A Flask app served by gunicorn in the shape `lethe api` has (2 gthread workers, 4 threads each). getFile checks
the bearer token (HS256, PyJWT), reads the row (Lethe's statement) and answers its fields as JSON. deleteFile
checks the token, locks the row and runs Lethe's own mark statement (the UPDATE, the redaction of
the file's events, the outbox row of the purge job and the deletion-journal row, in the transaction of the row
lock; app/db/files.py), commits, then publishes the job persistently with a publisher confirm (pika), as
Lethe's publisher does (PLAIN_CONFIRM=0: without the confirm). Nothing else: no problem documents, no metrics, no logs, no journal writer, no
outbox bookkeeping after the publish.

The other hot answers (`bench/http.py --hot`): createUpload checks the token and the declared size, then inserts
the file row and its session row (Lethe's statements) in one transaction and answers them; a byte range of a
file's content checks the token, reads the row and answers the range from the file on disk (PLAIN_FS_ROOT, the
key as its path); a link opens the sealed link (Lethe's format, PLAIN_LINK_SECRET), reads the row and answers
302 to a URL presigned by the minio client (PLAIN_S3_ENDPOINT, PLAIN_S3_BUCKET), with the same response headers.

    gunicorn -w 2 -k gthread --threads 4 -b 127.0.0.1:PORT bench.plain:app  (from the repository)
    (PLAIN_DATABASE_URL, PLAIN_BROKER_URL, PLAIN_SECRET in the environment; PYTHONPATH the repository)
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import jwt
import pika
from flask import Flask, Response, request
from psycopg.rows import namedtuple_row
from psycopg_pool import ConnectionPool

from app.db import files as files_sql
from app.db import sessions as sessions_sql
from app.domain.objects import FileObjects
from app.platform.jobs import PURGE_ACTOR, PURGE_QUEUE
from app.platform.links import BadLink, Sealer

PART_SIZE = 8 * 1024 * 1024  # file.part_size's default
MAX_SIZE = 1024**3  # file.max_size's default
SESSION_TTL = timedelta(hours=24)  # upload.session_ttl's default
RANGE = re.compile(r"bytes=(\d+)-(\d+)")

QUEUE = "plain_" + PURGE_QUEUE  # a queue of its own: Lethe's is declared with other arguments
app = Flask(__name__)
_pool: ConnectionPool | None = None
_local = threading.local()
_lock = threading.Lock()


def pool() -> ConnectionPool:
    global _pool
    with _lock:
        if _pool is None:  # after gunicorn's fork: a pool of the worker's own
            _pool = ConnectionPool(
                os.environ["PLAIN_DATABASE_URL"], min_size=4, max_size=8, kwargs={"row_factory": namedtuple_row}
            )
        return _pool


def channel() -> Any:
    """This thread's channel, with publisher confirms (as Lethe's broker publishes) unless PLAIN_CONFIRM=0 (a
    persistent publish the broker may still lose: a weaker promise than Lethe's, measured for the comparison)."""
    if getattr(_local, "channel", None) is None:
        connection = pika.BlockingConnection(pika.URLParameters(os.environ["PLAIN_BROKER_URL"]))
        opened = connection.channel()
        opened.queue_declare(QUEUE, durable=True)
        if os.environ.get("PLAIN_CONFIRM", "1") == "1":
            opened.confirm_delivery()
        _local.connection, _local.channel = connection, opened
    return _local.channel


def caller() -> uuid.UUID | None:
    header = request.headers.get("Authorization", "")
    try:
        claims = jwt.decode(header.removeprefix("Bearer "), os.environ["PLAIN_SECRET"], algorithms=["HS256"])
        return uuid.UUID(claims["sub"])
    except (jwt.PyJWTError, KeyError, ValueError):
        return None


@app.get("/api/v1/files/<uuid:file_id>")
def get_file(file_id: uuid.UUID) -> Response:
    who = caller()
    if who is None:
        return Response(status=401)
    with pool().connection() as conn:
        row = files_sql.file_by_id(conn, file_id)
    if row is None or row.uploaded_by != who or row.deleted_at is not None:
        return Response(status=404)
    shown = {
        "id": str(row.id),
        "name": row.original_name,
        "mime_type": row.mime_type,
        "size_bytes": row.size_bytes,
        "purpose": row.purpose,
        "upload_state": row.upload_state,
        "scan_status": row.scan_status,
        "sha256": row.sha256,
        "created_at": row.created_at.isoformat(),
    }
    return Response(json.dumps(shown), mimetype="application/json")


@app.post("/api/v1/files/batch-delete")
def batch_delete() -> Response:
    """Up to 1,000 of the caller's files: the rows locked, Lethe's mark statement for those of the caller's
    that live, one job published; an answer per id."""
    who = caller()
    if who is None:
        return Response(status=401)
    try:
        ids = [uuid.UUID(value) for value in (request.get_json(silent=True) or {})["ids"]][:1000]
    except (KeyError, TypeError, ValueError):
        return Response(status=422)
    now = datetime.now(UTC)
    with pool().connection() as conn, conn.transaction():
        rows = files_sql.lock_files(conn, sorted(set(ids)))
        live = [row.id for row in rows if row.uploaded_by == who and row.deleted_at is None]
        marked = files_sql.set_deleted(conn, live, now, "file", (PURGE_QUEUE, PURGE_ACTOR, now), live, journal=True)
    if marked.file_ids:
        publish(marked.file_ids)
    done = set(marked.file_ids)
    answers = [
        {"id": str(i), "status": 204 if i in done else 409 if i in marked.attached else 404, "reason": None}
        for i in ids
    ]
    return Response(json.dumps({"results": answers}), mimetype="application/json")


def publish(file_ids: list[uuid.UUID]) -> None:
    body = {"queue_name": PURGE_QUEUE, "actor_name": PURGE_ACTOR, "args": [[str(i) for i in file_ids]], "kwargs": {}}
    channel().basic_publish("", QUEUE, json.dumps(body).encode(), pika.BasicProperties(delivery_mode=2))


@app.delete("/api/v1/files/<uuid:file_id>")
def delete_file(file_id: uuid.UUID) -> Response:
    who = caller()
    if who is None:
        return Response(status=401)
    now = datetime.now(UTC)
    with pool().connection() as conn, conn.transaction():
        rows = files_sql.lock_files(conn, [file_id])
        if not rows or rows[0].uploaded_by != who or rows[0].deleted_at is not None:
            return Response(status=404)
        marked = files_sql.set_deleted(
            conn, [file_id], now, "file", (PURGE_QUEUE, PURGE_ACTOR, now), [file_id], journal=True
        )
    if file_id in marked.attached:
        return Response(status=409)
    publish([file_id])
    return Response(status=204)


@app.post("/api/v1/uploads")
def create_upload() -> Response:
    who = caller()
    if who is None:
        return Response(status=401)
    body = request.get_json(silent=True)
    try:
        name, size, mime_type = str(body["name"]), int(body["size_bytes"]), str(body["mime_type"])
    except (KeyError, TypeError, ValueError):
        return Response(status=422)
    if not 0 <= size <= MAX_SIZE:
        return Response(status=413)
    file_id, now = uuid.uuid4(), datetime.now(UTC)
    row = {
        "id": file_id,
        "uploaded_by": who,
        "purpose": body.get("purpose", "attachment"),
        "original_name": name,
        "mime_type": mime_type,
        "size_bytes": size,
        "scope_id": None,
        "object_key": FileObjects(file_id).next_original,
        "created_at": now,
        "encrypted": False,
        "key_id": None,
        "wrapped_key": None,
        "piece_size": None,
    }
    session = {
        "file_id": file_id,
        "part_size": PART_SIZE,
        "part_count": max(1, -(-size // PART_SIZE)),
        "storage_upload_id": None,
        "expected_sha256": None,
        "created_at": now,
        "expires_at": now + SESSION_TTL,
        "protocol": "native",
    }
    with pool().connection() as conn, conn.transaction():
        files_sql.insert_file(conn, row)
        sessions_sql.insert_session(conn, session)
    shown = {
        "file": {"id": str(file_id), "name": name, "mime_type": mime_type, "size_bytes": size},
        "upload": {
            "file_id": str(file_id),
            "state": "open",
            "part_size": PART_SIZE,
            "part_count": session["part_count"],
            "expires_at": session["expires_at"].isoformat(),
        },
    }
    return Response(json.dumps(shown), status=201, mimetype="application/json")


@app.get("/api/v1/files/<uuid:file_id>/content")
def file_content(file_id: uuid.UUID) -> Response:
    """One byte range (bytes=a-b) of a complete file the caller uploaded, from the disk."""
    who = caller()
    if who is None:
        return Response(status=401)
    wanted = RANGE.fullmatch(request.headers.get("Range", ""))
    with pool().connection() as conn:
        row = files_sql.file_by_id(conn, file_id)
    if row is None or row.uploaded_by != who or row.deleted_at is not None or row.upload_state != "complete":
        return Response(status=404)
    first, last = (int(wanted[1]), int(wanted[2])) if wanted else (0, row.size_bytes - 1)
    last = min(last, row.size_bytes - 1)
    with open(os.path.join(os.environ["PLAIN_FS_ROOT"], *row.object_key.split("/")), "rb") as stored:
        stored.seek(first)
        data = stored.read(last - first + 1)
    headers = {"Content-Range": f"bytes {first}-{last}/{row.size_bytes}", "Accept-Ranges": "bytes"}
    return Response(data, status=206, mimetype="application/octet-stream", headers=headers)


@cache
def signer() -> Any:
    from minio import Minio

    return Minio(
        os.environ["PLAIN_S3_ENDPOINT"], access_key="testing", secret_key="testing", region="us-east-1", secure=False
    )


@app.get("/api/v1/links/<string:token>")
def link(token: str) -> Response:
    try:
        opened = Sealer(os.environ["PLAIN_LINK_SECRET"]).open(token)
    except BadLink:
        return Response(status=403)
    if datetime.now(UTC) >= opened.expires_at:
        return Response(status=403)
    with pool().connection() as conn:
        row = files_sql.file_by_id(conn, opened.file_id)
    if row is None or row.deleted_at is not None or row.upload_state != "complete":
        return Response(status=404)
    url = signer().get_presigned_url(
        "GET",
        os.environ["PLAIN_S3_BUCKET"],
        row.object_key,
        expires=timedelta(minutes=5),
        response_headers={
            "response-content-type": "application/octet-stream",
            "response-content-disposition": "attachment",
            "response-cache-control": "private, no-store",
        },
    )
    return Response(status=302, headers={"Location": url, "Cache-Control": "private, no-store"})
