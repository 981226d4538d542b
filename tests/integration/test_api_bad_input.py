"""No input may produce a 5xx (issue 21): generated JSON (deep, wide, odd types, huge numbers, odd strings) and
generated raw bodies, thrown at every endpoint that reads JSON, found from the application's own routes."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.app import _reads_json
from app.api.json_body import nesting_depth
from tests.support.helpers import problem
from tests.support.lethe import OWNER

FS_ONLY = pytest.mark.parametrize("raw_store", ["fs"], indirect=True)
FIELDS = ("name", "size_bytes", "mime_type", "purpose", "sha256", "scope_id", "file_ids", "ids", "text", "subject_id",
          "file_id", "body")
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-10**40, max_value=10**40)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40)
           | st.sampled_from(["", "\x00", "\ud800", "../../etc", "a" * 5000, str(uuid.uuid4()), "attachment"]))
VALUES = st.recursive(SCALARS, lambda children: st.lists(children, max_size=6)
                      | st.dictionaries(st.text(max_size=8), children, max_size=6), max_leaves=25)
BODIES = VALUES | st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=6)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Bad input is answered before any store call: fs alone.
pytestmark = pytest.mark.one_store


def json_endpoints(lethe) -> list[tuple[str, str]]:
    """(method, path) of every route whose handler reads a JSON body, path parameters filled in."""
    found = []
    with lethe.app.test_request_context():
        for rule in lethe.app.url_map.iter_rules():
            for method in sorted((rule.methods or set()) & {"POST", "PUT", "PATCH"}):
                if _reads_json(rule.endpoint, method):
                    path = re.sub(r"<uuid:[^>]+>", str(uuid.uuid4()), rule.rule)
                    path = re.sub(r"<int:[^>]+>", "1", path)
                    found.append((method, re.sub(r"<[^>]+>", "k-1", path)))
    assert len(found) >= 6, found  # uploads, messages, drafts, slots, erasures, ...
    return found


def send(lethe, method, path, data: bytes):
    return lethe.call(method, path, OWNER, data=data, headers={"Content-Type": "application/json"})


@FS_ONLY
@SETTINGS
@given(body=BODIES)
def test_no_generated_json_body_gets_a_5xx(lethe, body):
    raw = json.dumps(body, allow_nan=True).encode()
    for method, path in json_endpoints(lethe):
        response = send(lethe, method, path, raw)
        assert response.status_code < 500, (method, path, response.get_data(as_text=True))


@FS_ONLY
@SETTINGS
@given(raw=st.binary(max_size=200) | st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)
       | st.integers(1, 3000).map(lambda n: b'{"name": ' + b"[" * n + b"]" * n + b"}"))
def test_no_raw_body_gets_a_5xx(lethe, raw):
    for method, path in json_endpoints(lethe):
        response = send(lethe, method, path, raw)
        assert response.status_code < 500, (method, path, response.get_data(as_text=True))


@FS_ONLY
def test_deep_and_malformed_json_are_named(lethe):
    deep = b"[" * 1000 + b"]" * 1000
    for method, path in json_endpoints(lethe):
        problem(send(lethe, method, path, deep), 400, "bad_request", "json_too_deep")
        problem(send(lethe, method, path, b'{"name": ' + deep + b"}"), 400, "bad_request", "json_too_deep")
        for broken in (b'{"name": "Canary-Q9"', b'{"name": "Canary-Q9",}', b'{"name": "Canary-Q9\xff"}'):
            body = problem(send(lethe, method, path, broken), 400, "bad_request", "malformed_json")
            assert "unknown_fields" not in json.dumps(body) and "Canary" not in json.dumps(body)  # never echoed
    # 32 levels are fine (api.max_json_depth); the answer is the endpoint's own, not a parse error
    shallow = json.dumps({"name": json.loads("[" * 31 + "]" * 31)}).encode()
    assert nesting_depth(shallow) == 32
    assert "json_too_deep" not in send(lethe, "POST", "/api/v1/uploads", shallow).get_data(as_text=True)


def test_nesting_depth_ignores_brackets_inside_strings():
    assert nesting_depth(b'{"a": "[[[[", "b": [1, {"c": "}}"}]}') == 3
    assert nesting_depth(b'"\\"[["') == 0
    assert nesting_depth(b"") == 0
