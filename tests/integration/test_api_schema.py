"""Property-based API test (schemathesis, from_wsgi) over every route: no 5xx, and every answer matches
the OpenAPI document (status, content type, body).

schemathesis is used as a library here: its pytest plugin (from_fixture) reads a node attribute that
pytest 9 no longer has, so the test walks the operations itself and runs one hypothesis test for each.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.storage.fs import FsStore
from tests.support.lethe import ALEX, Lethe


@schemathesis.serializer("application/offset+octet-stream")
def _tus_bytes(ctx, value):
    """tus bodies (issue 25) are raw bytes, as application/octet-stream is."""
    return {"data": value if isinstance(value, bytes) else str(value).encode()}


@pytest.fixture
def lethe_fs(database_url, tmp_path, clock):
    from tests.support.database import truncate_all

    truncate_all(database_url)
    lethe = Lethe(database_url, FsStore(str(tmp_path / "objects")), clock)
    yield lethe
    lethe.close()


def test_every_route_answers_per_its_schema_and_never_5xx(lethe_fs):
    # A little real data, so that some generated requests meet a live file.
    lethe_fs.upload(ALEX, b"some bytes")
    schema = schemathesis.openapi.from_wsgi("/openapi.json", lethe_fs.app)
    labels = []
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # (an Err is a schema error: the test fails on it)
        labels.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            # Rules beyond the schema (file states, configured limits) rightly refuse some schema-valid
            # requests with 409 or 422, so "positive data acceptance" is not asked of them.
            case.call_and_validate(headers=ALEX.headers, excluded_checks=[positive_data_acceptance])

        try:
            check()
        except Exception as exc:
            raise AssertionError(f"{operation.label}: {exc}") from exc
    assert len(labels) >= 11  # every route of /api/v1 was exercised


def test_every_operation_has_a_stable_camel_case_operation_id(lethe):
    """Clients generate code from /openapi.json and the docs name operations (deleteFile): every operation
    has its own camelCase operationId (issue 14, point 5)."""
    import re

    spec = lethe.call("GET", "/openapi.json").json
    found = {
        (method, path): operation.get("operationId")
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in ("get", "put", "post", "delete", "patch") and path.startswith("/api/v1/")
    }
    assert found and all(op and re.fullmatch(r"[a-z][A-Za-z]+", op) for op in found.values()), found
    assert len(set(found.values())) == len(found)
    assert found[("delete", "/api/v1/files/{file_id}")] == "deleteFile"
    assert found[("post", "/api/v1/uploads")] == "createUpload"
