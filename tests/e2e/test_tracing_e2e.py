"""Traces end to end: the api and a worker as real processes on PostgreSQL and RabbitMQ, exporting over OTLP/HTTP to a
receiver of the suite's own (decoded with opentelemetry-proto). One deleteFile is one trace: the request, the
publish of its job, the worker's purge with its chunk and the store's deletes, the journal write, and the webhook
job with its attempt, each span's parent in the trace. An upload, a tus PATCH and an erasure are traces too, and
no span, event or resource holds the canary name, an object key, the content's digest or the bearer token. Log
lines inside a span carry its trace id."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
import urllib.request
import uuid
from typing import Any

import pytest

from app.domain.tus import encode_metadata
from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call, upload
from tests.support.otlp import Receiver
from tests.support.ports import free_port
from tests.support.roles import start_api_and_worker
from tests.support.webhook_receiver import Receiver as WebhookReceiver

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Trace-divorce-papers"
CONTENT = b"the words of a private letter " * 8
CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
KEY_SHAPE = re.compile(r"f/[0-9a-f]{2}/[0-9a-f]{2}/|uploads/[0-9a-f]")


RECEIVED: list[Receiver] = []


def wait_until(condition, what: str, roles, timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            seen = sorted({(s.service, s.span.name, str(s.attribute("http.route"))) for r in RECEIVED for s in r.spans})
            raise AssertionError(f"{what}\nspans: {seen}\n" + "\n".join(role.tail(3000) for role in roles))
        time.sleep(0.2)


def server_span(receiver: Receiver, method: str, route: str) -> Any:
    spans = [
        s
        for s in list(receiver.spans)
        if s.service == "lethe-api" and s.attribute("http.route") == route and s.span.name.startswith(method + " ")
    ]
    return spans[-1] if spans else None


def chain(spans: list[Any], leaf: Any) -> list[str]:
    """The names from a span up to the root of its trace; fails on a parent missing from the trace."""
    by_id = {s.span_id: s for s in spans}
    names = [leaf.span.name]
    current = leaf
    while current.parent_id and current.parent_id != "0" * 16:
        assert current.parent_id in by_id, f"{current.span.name}: parent not in the trace"
        current = by_id[current.parent_id]
        names.append(current.span.name)
    return names


def render(spans: list[Any]) -> str:
    """A trace as an indented tree of span names and services, children in start order."""
    children: dict[str, list[Any]] = {}
    for s in spans:
        children.setdefault(s.parent_id, []).append(s)
    lines: list[str] = []

    def walk(span: Any, depth: int) -> None:
        lines.append(f"{'  ' * depth}{span.span.name}  [{span.service}]")
        for child in sorted(children.get(span.span_id, []), key=lambda c: c.span.start_time_unix_nano):
            walk(child, depth + 1)

    for root in [s for s in spans if s.parent_id in ("", "0" * 16)]:
        walk(root, 0)
    return "\n".join(lines) + "\n"


def test_one_deletion_is_one_trace_across_the_roles_and_no_span_names_anyone(role_env, start_role, tmp_path):
    receiver, hooks = Receiver(), WebhookReceiver()
    RECEIVED[:] = [receiver]
    try:
        secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
        endpoints = [{"name": "app", "url": hooks.url, "secret": secret, "events": ["file.purged"]}]
        env = dict(
            role_env,
            LETHE_WEBHOOKS_ENDPOINTS=json.dumps(endpoints),
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_TRACES_SAMPLER="always_on",
        )
        env["LETHE_RETENTION_POLICIES"] = json.dumps(
            [{"name": "chat-files", "purpose": "attachment", "max_age": "30d", "grace": "0s", "schedule": "0 3 * * *"}]
        )
        env["LETHE_SCHEDULE_DEV_FAST"] = "true"  # the retention policy runs once at the scheduler's start
        api, worker, base = start_api_and_worker(start_role, env, tmp_path)
        scheduler = start_role(
            ["scheduler"],
            dict(env, LETHE_METRICS_PORT=str(free_port()), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "sched-metrics")),
        )
        roles = (api, worker, scheduler)
        api_v1 = base + "/api/v1"
        person = uuid.uuid4()
        token = mint_token(SECRET, person)
        manager = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write", "manage"))

        # An upload: a trace of its own per request
        file_id = upload(api_v1, token, f"{CANARY}.txt", data=CONTENT, worker=worker)
        wait_until(
            lambda: server_span(receiver, "POST", "/api/v1/uploads/<uuid:file_id>/complete"), "no completion", roles
        )

        scanned = wait_until(
            lambda: [s for s in receiver.spans if s.span.name == "job scan_file"], "no scan job span", roles
        )
        completed = server_span(receiver, "POST", "/api/v1/uploads/<uuid:file_id>/complete")
        assert any(s.trace_id == completed.trace_id for s in scanned)  # the scan continues the completion's trace

        # The scheduler's periodic jobs are roots; the cleanup's steps and the retention run carry their counts
        def periodic() -> list[Any] | None:
            roots = [s for s in receiver.spans if s.span.name in ("scheduler.cleanup", "scheduler.retention")]
            steps = [s for s in receiver.spans if s.span.name == "cleanup.step"]
            runs = [s for s in receiver.spans if s.span.name == "retention.run"]
            return (
                roots
                if len(steps) >= 18
                and runs
                and {r.span.name for r in roots}
                == {
                    "scheduler.cleanup",
                    "scheduler.retention",
                }
                else None
            )

        roots = wait_until(periodic, "no periodic job's trace", roles)
        assert all(root.parent_id in ("", "0" * 16) and root.service == "lethe-scheduler" for root in roots)
        step = next(s for s in receiver.spans if s.span.name == "cleanup.step" and s.attribute("lethe.step") == "f")
        assert step.attribute("lethe.step_name") == "backlog" and step.attribute("lethe.candidates") is not None
        # The scheduler sends its job straight to the broker: the middleware carries the root's context on it. The
        # job's span ends after its steps, so it may reach the receiver a batch after them.
        wait_until(
            lambda: any(s.span.name == "job cleanup_pending" for s in receiver.trace(step.trace_id)),
            "the cleanup job's span never arrived",
            roles,
        )
        assert chain(receiver.trace(step.trace_id), step)[1:] == ["job cleanup_pending", "scheduler.cleanup"]
        run = next(s for s in receiver.spans if s.span.name == "retention.run")
        assert run.attribute("lethe.policy") == "chat-files"

        # When the file is deleted: one trace from the request to the webhook's attempt
        assert call("DELETE", f"{api_v1}/files/{file_id}", token)[0] == 204
        delete = wait_until(
            lambda: server_span(receiver, "DELETE", "/api/v1/files/<uuid:file_id>"), "no DELETE span", roles
        )
        assert delete.parent_id in ("", "0" * 16)  # the client sent no traceparent: the request is the root

        def whole() -> list[Any] | None:
            spans = receiver.trace(delete.trace_id)
            names = {s.span.name for s in spans}
            wanted = {
                "job purge_objects",
                "purge.chunk",
                "store.delete_many",
                "job deliver_webhooks",
                "webhook.attempt",
            }
            return spans if wanted <= names and "journal.write" in names else None

        spans = wait_until(whole, "the deletion's trace is not whole", roles)
        assert {s.service for s in spans} >= {"lethe-api", "lethe-worker"}
        named = {s.span.name: s for s in spans}
        assert chain(spans, named["store.delete_many"])[-1] == delete.span.name
        purge_path = chain(spans, named["store.delete_many"])
        assert purge_path[:4] == ["store.delete_many", "purge.chunk", "job purge_objects", "outbox.publish"]
        hook_path = chain(spans, named["webhook.attempt"])
        assert hook_path[:3] == ["webhook.attempt", "job deliver_webhooks", "outbox.publish"]
        assert "job purge_objects" in hook_path and hook_path[-1] == delete.span.name
        assert named["webhook.attempt"].attribute("http.response.status_code") == 204
        assert named["webhook.attempt"].attribute("lethe.endpoint") == "app"
        assert named["store.delete_many"].attribute("lethe.prefix") == "f"
        assert named["store.delete_many"].attribute("lethe.keys") >= 1
        assert named["job purge_objects"].attribute("messaging.destination.name") == "maintenance"
        assert {"tx file.delete", "tx purge.clear", "tx purge.rows"} <= {s.span.name for s in spans}  # transactions
        if os.environ.get("LETHE_TRACE_TREE"):  # docs/operations.md's rendering of one deletion's trace
            with open(os.environ["LETHE_TRACE_TREE"], "w") as out:
                out.write(render(spans))
        # The worker's log lines inside the purge name its trace
        wait_until(lambda: f'"trace_id": "{delete.trace_id}"' in worker.output(), "no log line names the trace", roles)

        # A tus upload: creation and a PATCH, each a trace
        tus = {"Tus-Resumable": "1.0.0", "Authorization": f"Bearer {token}"}
        created = urllib.request.urlopen(
            urllib.request.Request(
                f"{api_v1}/tus",
                method="POST",
                headers={
                    **tus,
                    "Upload-Length": str(len(CONTENT)),
                    "Upload-Metadata": encode_metadata({"filename": f"{CANARY}.txt", "filetype": "text/plain"}),
                },
            ),
            timeout=10,
        )
        location = created.headers["Location"]
        patched = urllib.request.urlopen(
            urllib.request.Request(
                base + location,
                data=CONTENT,
                method="PATCH",
                headers={
                    **tus,
                    "Upload-Offset": "0",
                    "Content-Type": "application/offset+octet-stream",
                    "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",  # a caller's own trace, continued
                },
            ),
            timeout=10,
        )
        assert patched.status == 204
        tus_patch = wait_until(
            lambda: server_span(receiver, "PATCH", "/api/v1/tus/<uuid:file_id>"), "no tus PATCH span", roles
        )
        assert (tus_patch.trace_id, tus_patch.parent_id) == (CALLER_TRACE, CALLER_SPAN)

        # An erasure: its rounds in the worker, in the trace of its request
        subject = uuid.uuid4()
        upload(api_v1, mint_token(SECRET, subject), f"{CANARY}-2.txt", data=CONTENT, worker=worker)
        status, erasure = call("POST", f"{api_v1}/erasures", manager, {"subject_id": str(subject)})
        assert status == 202, erasure
        asked = wait_until(lambda: server_span(receiver, "POST", "/api/v1/erasures"), "no erasure span", roles)
        rounds = wait_until(
            lambda: [s for s in receiver.trace(asked.trace_id) if s.span.name == "erasure.round"],
            "no erasure round in the erasure's trace",
            roles,
        )
        assert rounds[-1].attribute("lethe.erasure_id") == erasure["id"]
        assert chain(receiver.trace(asked.trace_id), rounds[-1])[-1] == asked.span.name

        # Nothing exported names anyone: not the name, a key, the digest, the token
        digest = hashlib.sha256(CONTENT).hexdigest()
        everything = [s.text for s in receiver.spans]
        assert len(everything) > 30
        for text in everything:
            assert CANARY not in text and digest not in text and token not in text and manager not in text
            assert not KEY_SHAPE.search(text), text
            assert str(person) not in text and str(subject) not in text
    finally:
        receiver.close()
        hooks.close()
