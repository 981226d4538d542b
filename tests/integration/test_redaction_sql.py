"""The mark redacts stored events in SQL (issue 24: one statement, no payload through Python); the SQL is
built from the rule's constants and must give exactly what the rule (app.domain.redaction) gives: the same
redacted payload, or a refusal where the rule raises. Generated payloads, on the real PostgreSQL."""

from __future__ import annotations

import json

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb

from app.db import redaction
from app.domain.redaction import BLANKED, RedactionError, redact_file_event
from tests.unit.test_redaction import files

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)

payloads = st.one_of(
    files.map(lambda file: {"file": file}),  # what is stored
    files.flatmap(
        lambda file: st.sampled_from(sorted(file)).map(  # a kept member missing or null
            lambda name: {"file": {k: (None if k == name else v) for k, v in file.items()}}
        )
    ),
    files.flatmap(
        lambda file: st.sampled_from(sorted(file)).map(
            lambda name: {"file": {k: v for k, v in file.items() if k != name}}
        )
    ),
    json_values,  # anything else
    st.dictionaries(st.text(max_size=8), json_values, max_size=3).map(lambda d: {**d, "file": d.get("x", 1)}),
)
# PostgreSQL's jsonb holds no NUL character (and the API refuses one in every string it stores)
payloads = payloads.filter(lambda payload: "\\u0000" not in json.dumps(payload))
kinds: st.SearchStrategy[tuple[str, int]] = st.sampled_from(
    [("file.updated", 1), ("file.updated", 2), ("file.created", 1)]
)


def by_sql(conn, event_type, version, payload):
    sql = (
        f"SELECT {redaction.redactable('e')} AS ok, "
        f"CASE WHEN {redaction.redactable('e')} THEN {redaction.redacted_payload('e', 'blanked')} END AS out "
        "FROM (SELECT %(type)s::text AS type, %(version)s::int AS schema_version, %(payload)s::jsonb AS payload) e"
    )
    return conn.execute(
        sql, {"type": event_type, "version": version, "payload": Jsonb(payload), "blanked": Jsonb(BLANKED)}
    ).fetchone()


@pytest.fixture
def conn(database_url):
    """One connection for every example (a pool would open it inside an example, where its jitter draws on
    the random module, which hypothesis warns of)."""
    with psycopg.connect(database_url, autocommit=True, row_factory=namedtuple_row) as connection:
        yield connection


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=kinds, payload=payloads)
def test_the_sql_redaction_answers_as_the_rule(conn, kind, payload):
    try:
        expected = redact_file_event(kind[0], kind[1], payload)
    except RedactionError:
        expected = None
    row = by_sql(conn, kind[0], kind[1], payload)
    if expected is None:
        assert row.ok is False, (kind, payload)
    else:
        assert row.ok is True and row.out == expected, (kind, payload, row.out)
        # and redacting the result again gives the same document (D6)
        again = by_sql(conn, kind[0], kind[1], row.out)
        assert again.out == row.out
