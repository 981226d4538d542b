"""What tracing exports, as pure rules: when it is on, which OTEL_* values Lethe refuses (by name), and the
allow-list every span passes before it leaves (no name, key, digest or token survives it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from app.platform import tracing
from app.platform.tracing import ALLOWED, config_errors, name_free, scrubbed, wanted
from tests.support import zygote

KEY = "f/3a/9c/3a9c0d1e-5b7f-4c2a-9d8e-1f2a3b4c5d6e/original"
DIGEST = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"


def test_tracing_is_off_unless_asked_for():
    assert not wanted({})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not wanted({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})


def test_what_lethe_cannot_honour_is_named_never_its_value():
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert config_errors(on) == {}
    assert config_errors({**on, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == {}
    refused = config_errors({**on, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert list(refused) == ["OTEL_EXPORTER_OTLP_PROTOCOL"] and "grpc" not in str(refused.values()).replace(
        "(grpc)", ""
    ).replace("gRPC", "")
    assert list(config_errors({"OTEL_TRACES_EXPORTER": "zipkin-secret"})) == ["OTEL_TRACES_EXPORTER"]
    assert "zipkin-secret" not in str(config_errors({"OTEL_TRACES_EXPORTER": "zipkin-secret"}))
    assert config_errors({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == {}  # off: nothing to honour


def test_the_allow_list_keeps_routes_and_counts_and_drops_paths_and_keys():
    kept = name_free(
        {
            "http.route": "/api/v1/files/<uuid:file_id>",
            "http.target": "/api/v1/links/secret-token",
            "url.path": "/api/v1/tus/3a9c",
            "http.url": "http://files/api/v1/links/x?sig=1",
            "user_agent.original": "curl",
            "client.address": "10.0.0.7",
            "http.response.status_code": 204,
            "lethe.files": 3,
            "lethe.prefix": "f",
            "lethe.key": KEY,
            "lethe.sum": DIGEST,
            "lethe.auth": TOKEN,
            "db.statement": "SELECT * FROM files WHERE name = 'Canary.txt'",
        }
    )
    assert kept == {
        "http.route": "/api/v1/files/<uuid:file_id>",
        "http.response.status_code": 204,
        "lethe.files": 3,
        "lethe.prefix": "f",
    }


def test_a_scrubbed_span_keeps_its_shape_and_loses_messages():
    context = SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(1))
    span = ReadableSpan(
        name="store.delete_many",
        context=context,
        attributes={"lethe.keys": 2, "url.full": "http://s3/bucket/" + KEY},
        events=[
            Event("exception", {"exception.type": "S3Error", "exception.message": KEY, "exception.stacktrace": KEY})
        ],
        kind=SpanKind.CLIENT,
        status=Status(StatusCode.ERROR, "AccessDenied on " + KEY),
        start_time=1,
        end_time=2,
    )
    clean = scrubbed(span)
    assert clean.name == "store.delete_many" and clean.kind is SpanKind.CLIENT and clean.context == context
    assert dict(clean.attributes or {}) == {"lethe.keys": 2}
    assert [(e.name, dict(e.attributes or {})) for e in clean.events] == [("exception", {"exception.type": "S3Error"})]
    assert clean.status.status_code is StatusCode.ERROR and not clean.status.description
    assert scrubbed(ReadableSpan(name="GET " + KEY, context=context)).name == "span"
    route = "PUT /api/v1/uploads/<uuid:file_id>/parts/<part:part_number>"
    assert scrubbed(ReadableSpan(name=route, context=context)).name == route


@given(
    st.dictionaries(
        st.one_of(st.sampled_from(sorted(ALLOWED)), st.text(min_size=1, max_size=20), st.just("lethe.x")),
        st.one_of(
            st.integers(),
            st.sampled_from([KEY, DIGEST, TOKEN, "uploads/3a9c/part-1", "x " + KEY]),
            st.text(max_size=30),
        ),
        max_size=8,
    )
)
def test_nothing_shaped_like_a_key_digest_or_token_leaves(attributes):
    kept = name_free(attributes)
    assert all(key in ALLOWED or key.startswith("lethe.") for key in kept)
    for value in kept.values():
        if isinstance(value, str):
            assert not tracing._SECRET_SHAPES.search(value)


def test_a_role_refuses_a_protocol_it_cannot_speak_naming_the_variable():
    import sys

    env = {
        "PATH": "/usr/bin:/bin",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.internal:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    checked = zygote.run(
        [sys.executable, "-m", "app.entry", "config", "check"], env=env, capture_output=True, text=True, timeout=60
    )
    out = checked.stdout + checked.stderr
    assert checked.returncode == 2 and "OTEL_EXPORTER_OTLP_PROTOCOL" in out and "http/protobuf" in out
    assert "collector.internal" not in out and "Traceback" not in out
