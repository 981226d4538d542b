"""/healthz, /readyz, /metrics and the problem+json edge of the api (D1, D13, D15), in process."""

from __future__ import annotations

import json

import pytest
from dramatiq.brokers.stub import StubBroker

from app.api.app import create_app
from app.entry.wiring import build_runtime
from app.platform import config
from app.storage.s3 import S3Store


@pytest.fixture
def make_client(database_url, tmp_path):
    runtimes = []

    def make(store=None):
        cfg = config.load({"LETHE_DATABASE_URL": database_url, "LETHE_FILE_FS_ROOT": str(tmp_path / "objects")})
        runtime = build_runtime(cfg, StubBroker(), role="api", store=store)
        runtimes.append(runtime)
        return create_app(runtime).test_client()

    yield make
    for runtime in runtimes:
        runtime.close()


def test_healthz_and_readyz(make_client):
    client = make_client()
    assert client.get("/healthz").json == {"status": "ok"}
    response = client.get("/readyz")
    assert response.status_code == 200 and response.json == {"status": "ready"}


def test_readyz_is_a_503_problem_naming_the_dependency_but_not_its_address(make_client):
    from app.db.context import in_transaction
    from app.storage.guard import GuardedStore

    unreachable = S3Store("127.0.0.1:9", "bucket-Canary", "k", "s", region="us-east-1", secure=False)
    client = make_client(GuardedStore(unreachable, in_transaction))
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.mimetype == "application/problem+json"
    body = response.json
    assert body["code"] == "not_ready" and body["status"] == 503 and "store" in body["detail"]
    assert "127.0.0.1" not in response.get_data(as_text=True) and "Canary" not in response.get_data(as_text=True)


def test_unknown_route_and_wrong_method_are_problems(make_client):
    client = make_client()
    response = client.get("/no/such/route")
    assert response.status_code == 404 and response.mimetype == "application/problem+json"
    assert set(response.json) == {"type", "title", "status", "code"}
    response = client.post("/healthz")
    assert response.status_code == 405 and "GET" in response.headers["Allow"]
    assert response.json["code"] == "method_not_allowed"


def test_metrics_are_served_in_prometheus_format(make_client):
    client = make_client()
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert 'lethe_http_requests_total{method="GET",route="/healthz",status="200"}' in text


def test_openapi_document_is_served(make_client):
    response = make_client().get("/openapi.json")
    assert response.status_code == 200
    document = json.loads(response.get_data())
    assert document["info"]["title"] == "Lethe" and document["openapi"].startswith("3.")


def test_building_the_api_leaves_url_builders_and_the_documents_responses_for_their_first_use(make_client, monkeypatch):
    """Every test and every api process builds the app: werkzeug's URL builders (compiled Python, two a rule) and
    the document's error responses (marshmallow and apispec work) wait until a url_for or /openapi.json needs
    them, and both answer as before."""
    from flask import url_for
    from werkzeug.routing import Rule

    compiled: list[str] = []
    real = Rule._compile_builder

    def counting(self, append_unknown=True):
        compiled.append(self.rule)
        return real(self, append_unknown)

    monkeypatch.setattr(Rule, "_compile_builder", counting)
    client = make_client()
    app = client.application
    assert compiled == []
    assert app.extensions["flask-smorest"]["apis"][""]["ext_obj"].spec.to_dict()["components"].get("responses") is None
    with app.test_request_context():
        assert url_for("console.static", filename="console.css") == "/console/static/console.css"
        assert url_for("ops.healthz") == "/healthz"
    assert len(compiled) == 2  # the two rules asked for, one builder each
    document = client.get("/openapi.json").get_json()
    problem = document["components"]["responses"]["DEFAULT_ERROR"]["content"]["application/problem+json"]
    assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}
    assert document["paths"]["/api/v1/files/{file_id}"]["delete"]["responses"]["default"] == {
        "$ref": "#/components/responses/DEFAULT_ERROR"
    }
