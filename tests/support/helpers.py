"""Helpers the integration tests share: problem answers, table rows, a file's keys."""

from __future__ import annotations

from typing import Any

from app.db.conn import one
from app.domain.keys import original_key, variant_key

PROBLEM = "application/problem+json"


def problem(response, status: int, code: str, reason: str | None = None):
    """Assert a problem+json answer (RFC 9457) of that status, code and reason; returns its body."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    body = response.json
    assert body["status"] == status and body["code"] == code
    assert {"type", "title", "status", "code"} <= set(body)
    if reason is not None:
        assert body.get("reason") == reason
    return body


def rows(lethe, table, **where):
    clause = " AND ".join(f"{name} = %s" for name in where) or "true"
    return lethe.rt.db.read(
        lambda conn: conn.execute(f"SELECT * FROM {table} WHERE {clause}", tuple(where.values())).fetchall()
    )


def keys_of(file_id, revision=1):
    """Every key purge deletes for a file whose stored original is orig-<revision>."""
    return [original_key(file_id, r) for r in range(1, revision + 2)] + [
        variant_key(file_id, v) for v in ("thumb-small", "thumb-large", "preview", "poster")
    ]


def wait_for_a_lock_waiter(db, timeout_s: float = 10.0) -> None:
    """Return once some session of this test database waits on a lock: how a test knows that the thread it
    started reached the lock the test holds (a condition polled, never a window slept)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        waiting = db.read(
            lambda conn: (
                one(
                    conn.execute(
                        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'"
                    )
                ).n
            )
        )
        if waiting:
            return
        time.sleep(0.005)
    raise AssertionError("no session came to wait on the lock")


def attach_while_a_request_waits(lethe, author, file_id, request) -> dict[str, Any]:
    """Forced order (D10): hold a file's row lock as an attach does, send `request(client)` from a thread and
    wait until it queues on that lock, then attach the file to a message of `author` and commit; returns
    the request's JSON answer once it came."""
    import threading

    answer: dict[str, Any] = {}
    with lethe.rt.db.pool.connection() as conn, conn.transaction():
        conn.execute("SELECT id FROM files WHERE id = %s FOR UPDATE", (file_id,))
        thread = threading.Thread(target=lambda: answer.update(request(lethe.app.test_client()).get_json()))
        thread.start()
        wait_for_a_lock_waiter(lethe.rt.db)
        conn.execute("INSERT INTO messages (author_id, id, created_at) VALUES (%s, 'forced', now())", (author.id,))
        conn.execute(
            "INSERT INTO attachments (author_id, message_id, file_id, attached_at) VALUES (%s, 'forced', %s, now())",
            (author.id, file_id),
        )
    thread.join(10)
    return answer


def residue(raw_store, file_id) -> list[Any]:
    """Everything the store holds of a file: its objects (every version and delete marker on S3) and, on S3, the
    multipart uploads of its keys (a test may list; the service never does, K2)."""
    file_id = str(file_id)
    if raw_store.driver == "fs":
        return [
            listed.key
            for prefix in ("uploads/", "f/")
            for listed in raw_store.list_prefix(prefix)
            if file_id in listed.key
        ]
    found = [
        (item.object_name, item.version_id)
        for item in raw_store.client.list_objects(raw_store.bucket, recursive=True, include_version=True)
        if file_id in item.object_name
    ]
    uploads = raw_store.client._list_multipart_uploads(raw_store.bucket).uploads
    return found + [("multipart", upload.object_name) for upload in uploads if file_id in upload.object_name]


def rate_fields(headers: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the policy, with its name, and the current values) of an answer's RateLimit-Policy and RateLimit fields,
    read by a structured-field parser no one here wrote (http-sf): one policy each, the same name."""
    import http_sf

    parsed: Any = http_sf.parse(headers["RateLimit-Policy"].encode(), tltype="list")
    current: Any = http_sf.parse(headers["RateLimit"].encode(), tltype="list")
    ((name, policy),) = parsed
    ((same, now),) = current
    assert name == same
    return {"name": name, **policy}, dict(now)
