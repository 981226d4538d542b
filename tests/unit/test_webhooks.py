"""Standard Webhooks 1.0 as pure rules (issue 28): the signature is the one the `standardwebhooks` library
computes, secrets decode as the specification says, answers map to outcomes, and the retry schedule. And the
configuration key names each bad entry and field, never a URL or a secret."""

from __future__ import annotations

import base64
import json
import os
import sys
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from app.domain.webhooks import body_of, decode_secret, headers_of, message_id, next_attempt_at, outcome_of
from app.platform.config.entries import EntryErrors, parse_endpoints
from tests.support import zygote

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def secret(size: int = 32) -> str:
    return "whsec_" + base64.b64encode(os.urandom(size)).decode()


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=20), max_size=5))
def test_the_signature_is_the_libraries(data):
    key = secret()
    body = body_of("file.purged", NOW, data)
    headers = headers_of([decode_secret(key)], message_id("0" * 32), int(datetime.now(UTC).timestamp()), body)
    assert Webhook(key).verify(body, headers) == {
        "type": "file.purged",
        "timestamp": "2026-12-01T00:00:00Z",
        "data": data,
    }


def test_secrets_are_whsec_base64_of_24_to_64_bytes():
    assert len(decode_secret(secret(24))) == 24 and len(decode_secret(secret(64))) == 64
    for bad in (secret(23), secret(65), "whsec_not base64!", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 42, None):
        with pytest.raises(ValueError) as caught:
            decode_secret(bad)
        if isinstance(bad, str) and len(bad) > 12:
            assert bad[6:] not in str(caught.value)  # never the value


@pytest.mark.parametrize(
    "status, outcome",
    [
        (200, "delivered"),
        (204, "delivered"),
        (299, "delivered"),
        (None, "retry"),
        (500, "retry"),
        (503, "retry"),
        (410, "disable"),
        (400, "final"),
        (404, "final"),
        (429, "final"),
        (301, "final"),
    ],
)
def test_what_an_answer_means(status, outcome):
    assert outcome_of(status) == outcome


def test_the_schedule():
    schedule = (timedelta(seconds=5), timedelta(minutes=5))
    assert next_attempt_at(1, schedule, NOW) == NOW + timedelta(seconds=5)
    assert next_attempt_at(2, schedule, NOW) == NOW + timedelta(minutes=5)
    assert next_attempt_at(3, schedule, NOW) is None


def test_endpoints_parse_and_name_entry_and_field_only():
    key = secret()
    (parsed,) = parse_endpoints(
        json.dumps(
            [
                {
                    "name": "app",
                    "url": "https://h.example/x",
                    "secret": [key, secret()],
                    "events": ["file.purged", "file.purged"],
                }
            ]
        )
    )
    assert parsed.events == ("file.purged",) and len(parsed.secrets) == 2 and key not in repr(parsed)
    with pytest.raises(EntryErrors) as caught:
        parse_endpoints(
            [
                {"name": "Bad", "url": "https://user:pw@h.example:99999/", "secret": "whsec_c2hvcnQ="},
                {"name": "x", "url": "https://h.example", "secret": key, "events": [], "extra": 1},
            ]
        )
    text = " ".join(caught.value.messages)
    for expected in (
        "endpoint entry 1: name",
        "endpoint entry 1: url",
        "endpoint entry 1: secret",
        "endpoint entry 1: events is required",
        "endpoint x: events",
        "endpoint x: unknown field extra",
    ):
        assert expected in text, text
    assert key[6:20] not in text and "h.example" not in text and "pw" not in text


def test_config_check_exits_2_naming_the_entry_and_field_never_the_secret():
    key = secret()
    bad = json.dumps(
        [
            {"name": "app", "url": "ftp://hooks.example/x", "secret": "whsec_c2hvcnQ=", "events": ["file.gone"]},
            {"name": "app", "url": "https://hooks.example/x", "secret": [key], "events": ["file.purged"]},
        ]
    )
    env = {"PATH": os.environ.get("PATH", ""), "LETHE_WEBHOOKS_ENDPOINTS": bad, "LETHE_AUTH_JWT_SECRET": "x" * 40}
    result = zygote.run(
        [sys.executable, "-m", "app.entry", "config", "check"], capture_output=True, text=True, env=env, timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in output
    for expected in (
        "webhooks.endpoints",
        "endpoint app: url",
        "endpoint app: secret",
        "endpoint app: events",
        "endpoint app: name is used by another endpoint",
    ):
        assert expected in output, output
    assert key[6:20] not in output and "hooks.example" not in output
