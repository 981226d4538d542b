"""D15: log lines and Sentry events carry no name, key, digest or token."""

from __future__ import annotations

import io
import json
import logging

import pytest

from app.platform.observability.log_setup import ConsoleFormatter, RoleFilter, setup_logging
from app.platform.observability.logs import SensitiveFieldFilter
from app.platform.observability.sentry import scrub_event

CANARY = "holiday-Canary-91.pdf"


@pytest.fixture(autouse=True)
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def capture(fmt: str):
    setup_logging("worker", fmt, "INFO")
    handler = logging.getLogger().handlers[0]
    stream = io.StringIO()
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    return stream


def test_json_lines_carry_event_role_and_fields():
    stream = capture("json")
    logging.getLogger("lethe.test").info("purged", extra={"event": "purge.done", "count": 3})
    line = json.loads(stream.getvalue().strip())
    assert line["event"] == "purge.done" and line["count"] == 3 and line["role"] == "worker"
    assert line["level"] == "INFO" and line["logger"] == "lethe.test" and "ts" in line


def test_sensitive_fields_are_blanked_whatever_a_caller_passes():
    stream = capture("json")
    logging.getLogger("lethe.test").warning(
        "oops",
        extra={"original_name": CANARY, "object_key": CANARY, "sha256": CANARY, "token": CANARY, "file_id": "id-1"},
    )
    text = stream.getvalue()
    assert CANARY not in text
    assert json.loads(text)["file_id"] == "id-1"


def test_console_format_is_one_readable_line():
    stream = capture("console")
    logging.getLogger("lethe.test").info("relayed", extra={"event": "outbox.relayed", "count": 2})
    assert stream.getvalue().strip().endswith("lethe.test relayed event=outbox.relayed count=2")


def test_sentry_events_keep_only_the_allow_list():
    event = {
        "event_id": "e1",
        "level": "error",
        "request": {
            "method": "POST",
            "url": f"http://x/api/v1/uploads?name={CANARY}",
            "data": CANARY,
            "headers": {"Authorization": f"Bearer {CANARY}"},
            "cookies": CANARY,
        },
        "extra": {"name": CANARY},
        "breadcrumbs": {"values": [{"message": CANARY}]},
        "user": {"email": CANARY},
        "exception": {
            "values": [
                {
                    "type": "StorageError",
                    "value": "s3 get failed",
                    "stacktrace": {"frames": [{"function": "f", "vars": {"key": CANARY}}]},
                }
            ]
        },
    }
    clean = scrub_event(event)
    assert CANARY not in json.dumps(clean)
    assert clean["request"] == {"method": "POST", "url": "http://x/api/v1/uploads"}
    assert clean["exception"]["values"][0]["type"] == "StorageError"


def test_filters_alone():
    record = logging.makeLogRecord({"msg": "m", "token": CANARY})
    assert SensitiveFieldFilter().filter(record) and record.__dict__["token"] == "[redacted]"
    assert RoleFilter("api").filter(record) and record.__dict__["role"] == "api"
    assert "m" in ConsoleFormatter().format(record)


def test_log_event_keeps_counted_fields_and_withholds_the_rest(caplog):
    """The one way to log an event (app/platform/observability/logs.py): a field named like a key or a name is blanked, an
    exception becomes its type and code, a structure is withheld."""
    import logging

    from app.errors import ObjectFailed
    from app.platform.observability.logs import log_event

    canary = "Canary-logs-7731.pdf"
    with caplog.at_level(logging.INFO, logger="lethe.test"):
        log_event(
            logging.getLogger("lethe.test"),
            "info",
            "test.event",
            "something happened",
            files=3,
            original_name=canary,
            error=ObjectFailed(f"refused {canary}", "AccessDenied"),
            payload={"name": canary},
            ids=["a", "b"],
        )
    (record,) = caplog.records
    assert (record.event, record.files, record.ids) == ("test.event", 3, ["a", "b"])
    assert record.error == "ObjectFailed:AccessDenied"
    assert record.original_name == "[redacted]" and record.payload == "[withheld]"
    assert canary not in record.getMessage() + str(record.__dict__)


def test_every_event_goes_through_log_event():
    """No module builds extra={"event": ...} by hand: the canary rules live in one place (app/platform/observability/logs.py)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = [
        str(path.relative_to(root))
        for folder in ("app", "workers", "scheduler")
        for path in (root / folder).rglob("*.py")
        if path.name != "logs.py" and re.search(r"extra\s*=", path.read_text())
    ]
    assert offenders == []


def test_counts_under_a_listed_name_pass_and_secrets_are_caught_by_their_shape():
    """Scrub by field list and value shape, not by a broad name match (issue 14): `keys=6` is a count; an
    object key, a digest or a token is withheld under any field name."""
    stream = capture("json")
    object_key = "f/3c/1a/3c1a0d4e-0000-4000-8000-000000000000/orig-1"
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    logging.getLogger("lethe.test").info(
        "done",
        extra={
            "event": "purge.done",
            "keys": 6,
            "key": 2,
            "digest": 0,
            "note": object_key,
            "part": "uploads/x/part-1",
            "hash": "a" * 64,
            "auth": token,
            "file_id": "3c1a0d4e-0000-4000-8000-000000000000",
            "prefix": "issues/",
        },
    )
    line = json.loads(stream.getvalue())
    assert (line["keys"], line["key"], line["digest"]) == (6, 2, 0)
    assert line["note"] == line["part"] == line["hash"] == line["auth"] == "[redacted]"
    assert line["file_id"] == "3c1a0d4e-0000-4000-8000-000000000000" and line["prefix"] == "issues/"
    logging.getLogger("lethe.test").info("x", extra={"keys": ["f/00/00/a/orig-1"], "token": "abc"})
    assert "orig-1" not in stream.getvalue() and '"abc"' not in stream.getvalue()


def test_libvips_chatter_and_dramatiqs_expected_warning_stay_out_of_the_log():
    stream = capture("json")
    logging.getLogger("pyvips").info("VIPS: shrinkh by 3")
    logging.getLogger("dramatiq.broker.StubBroker").warning(
        "You're adding a middleware of the same type twice: %s. It may have unexpected results.",
        "<dramatiq.worker._WorkerMiddleware object at 0x7f>",
    )
    logging.getLogger("dramatiq.broker.StubBroker").warning("Consumer encountered a connection error")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["Consumer encountered a connection error"]


def test_the_deploy_docs_jq_filter_reads_lines_without_an_event(tmp_path):
    """docs/deploy.md's filter over a worker's log, where gunicorn's and libraries' lines carry no `event`."""
    import re
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    found = re.search(r"`jq -c '([^']+)'`", doc)
    assert found is not None
    program = found.group(1)
    lines = [
        {"message": "Booting worker", "logger": "gunicorn.error"},
        {"event": "purge.done", "count": 3},
        {"event": "cleanup.step"},
    ]
    done = subprocess.run(
        ["jq", "-c", program],
        input="\n".join(json.dumps(line) for line in lines),
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["event"] for line in done.stdout.splitlines()] == ["purge.done"]
