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

FIELDS = (
    "name",
    "size_bytes",
    "mime_type",
    "purpose",
    "sha256",
    "scope_id",
    "file_ids",
    "ids",
    "text",
    "subject_id",
    "file_id",
    "body",
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(["", "\x00", "\ud800", "../../etc", "a" * 5000, str(uuid.uuid4()), "attachment"])
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=25,
)
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


@pytest.mark.one_store
@SETTINGS
@given(body=BODIES)
def test_no_generated_json_body_gets_a_5xx(lethe, body):
    raw = json.dumps(body, allow_nan=True).encode()
    for method, path in json_endpoints(lethe):
        response = send(lethe, method, path, raw)
        assert response.status_code < 500, (method, path, response.get_data(as_text=True))


@pytest.mark.one_store
@SETTINGS
@given(
    raw=st.binary(max_size=200)
    | st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)
    | st.integers(1, 3000).map(lambda n: b'{"name": ' + b"[" * n + b"]" * n + b"}")
)
def test_no_raw_body_gets_a_5xx(lethe, raw):
    for method, path in json_endpoints(lethe):
        response = send(lethe, method, path, raw)
        assert response.status_code < 500, (method, path, response.get_data(as_text=True))


@pytest.mark.one_store
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


# Header values as a client (or an attacker) may send them: huge numbers, thousands of digits, overlong text,
# odd separators, dates out of range, every latin-1 character.
HEADER_VALUES = st.sampled_from(
    [
        "bytes=0-" + "9" * 5000,
        "bytes=" + "9" * 5000 + "-",
        "bytes=-" + "9" * 5000,
        "bytes=" + "0" * 4400 + "1-2",
        "bytes=0-1," * 2000,
        "bytes=-0",
        "bytes=5-1",
        '"' + "a" * 9000 + '"',
        "W/" * 3000,
        "*",
        "Mon, 99 Feb 99999 99:99:99 GMT",
        "Sat, 01 Jan 0001 00:00:00 GMT",
        "9" * 5000,
        "-1",
        "1e400",
        "Bearer " + "x" * 9000,
        "sha256 " + "A" * 9000,
        "filename " + "QQ==" * 3000,
        "\t \t",
    ]
) | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=300)
SERVING_HEADERS = (
    "Range",
    "If-Match",
    "If-None-Match",
    "If-Range",
    "If-Modified-Since",
    "If-Unmodified-Since",
    "Authorization",
)
TUS_HEADERS = (
    "Upload-Offset",
    "Upload-Length",
    "Upload-Checksum",
    "Upload-Metadata",
    "Tus-Resumable",
    "Upload-Defer-Length",
    "Upload-Concat",
)


@SETTINGS
@given(name=st.sampled_from(SERVING_HEADERS), value=HEADER_VALUES, link=st.booleans())
def test_no_header_of_a_download_answers_5xx(lethe, name, value, link):
    from tests.support.lethe import ALEX

    if not hasattr(lethe, "_served"):
        file_id = lethe.upload(ALEX, b"0123456789" * 10)
        lethe._served = (file_id, lethe.call("POST", f"/api/v1/files/{file_id}/links", ALEX, json={}).json)
    file_id, made = lethe._served
    headers = {name: value}
    if link and made and "url" in made:
        from urllib.parse import urlsplit

        answer = lethe.client.get(urlsplit(made["url"]).path, headers=headers)
    else:
        headers.setdefault("Authorization", ALEX.headers["Authorization"])
        answer = lethe.app.test_client().get(f"/api/v1/files/{file_id}/content", headers=headers)
    assert answer.status_code < 500, (name, value[:80], answer.status_code)


@SETTINGS
@given(name=st.sampled_from(TUS_HEADERS), value=HEADER_VALUES, method=st.sampled_from(["POST", "PATCH", "HEAD"]))
def test_no_tus_header_answers_5xx(lethe, name, value, method):
    from tests.support.lethe import ALEX

    headers = {
        "Tus-Resumable": "1.0.0",
        "Upload-Length": "10",
        "Upload-Offset": "0",
        "Content-Type": "application/offset+octet-stream",
        **ALEX.headers,
        name: value,
    }
    path = "/api/v1/tus" if method == "POST" else f"/api/v1/tus/{uuid.uuid4()}"
    answer = lethe.app.test_client().open(path, method=method, data=b"0123456789", headers=headers)
    assert answer.status_code < 500, (name, value[:80], answer.status_code)


@pytest.mark.parametrize(
    "value, status",
    [
        ("bytes=0-" + "9" * 5000, 206),
        ("bytes=" + "9" * 5000 + "-", 416),
        ("bytes=-" + "9" * 5000, 206),
        ("bytes=" + "0" * 4400 + "1-2", 206),
    ],
)
def test_a_range_of_thousands_of_digits_is_a_range(lethe, value, status):
    """Python refuses int() of more than 4,300 digits (a ValueError the download answered 500 with)."""
    from tests.support.lethe import ALEX

    file_id = lethe.upload(ALEX, b"0123456789" * 10)
    answer = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": value})
    assert answer.status_code == status
