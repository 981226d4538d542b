"""The fixtures of the tests that run Lethe's roles as processes (the roles themselves: tests/support/roles.py)."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.domain.webhooks import EVENTS
from tests.support.keyring import SEALED_ENV
from tests.support.ports import free_port
from tests.support.roles import Role, purge_queues, wait_for_http


@pytest.fixture(autouse=True)
def _empty_database(database_url):
    """Every test of the roles starts on empty tables: the files an earlier test's `lethe dev` sealed under a
    keyring of its own would make these roles refuse to start (a key id their keyring lacks), as they must."""
    from tests.support.database import truncate_all

    truncate_all(database_url)


@pytest.fixture
def role_env(database_url, broker_url, tmp_path):
    purge_queues(broker_url)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_AUTH_JWT_SECRET": "e2e-secret-of-sufficient-length-0123456789",
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        "LETHE_API_PORT": str(free_port()),
        "LETHE_METRICS_PORT": str(free_port()),
        "LETHE_API_WORKERS": "1",
        "LETHE_WORKER_PROCESSES": "1",
        "LETHE_WORKER_THREADS": "2",
        "LETHE_OUTBOX_RELAY_INTERVAL": "1s",
        "LETHE_OUTBOX_RELAY_AGE": "1s",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        **SEALED_ENV,  # files are sealed under their own keys, as in a new installation
    }
    return env


@pytest.fixture
def start_role(tmp_path):
    roles: list[Any] = []

    def start(args, env):
        role = Role(args, env, tmp_path / f"{args[0]}-{len(roles)}.log")
        roles.append(role)
        return role

    yield start
    for role in roles:
        role.kill()


# -- lethe dev for the clients' own tests (clients/python, clients/js) -------------------------------------------

CLIENT_SECRET = "client-tests-secret-of-sufficient-length-012"
CLIENT_HOOK_KEY = "whsec_" + base64.b64encode(b"k" * 32).decode()


@dataclass
class ClientDev:
    base: str
    hooks: Any
    role: Role
    page_port: int  # a page of the test's own may call the API from this origin (CORS)
    store: str


@pytest.fixture(scope="module")
def roomy_clamd(tmp_path_factory):
    """The real clamd, taking streams of the sizes the clients upload (the suite's own takes 1 MiB)."""
    from tests.support.clamd import RealClamd
    from tests.support.services import start_or_missing

    server = start_or_missing(
        RealClamd(tmp_path_factory.mktemp("clamd"), stream_max="64M"), "clamd (Debian package clamav-daemon)"
    )
    yield server
    server.stop()


@pytest.fixture(params=["fs", "seaweed"])
def client_dev(request, database_url, roomy_clamd, tmp_path):
    """`lethe dev` on fs or SeaweedFS with the real clamd and a webhook receiver taking every type."""
    from tests.support.stores import make_s3_store
    from tests.support.webhook_receiver import Receiver

    hooks = Receiver(default=204)
    port, page_port = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": CLIENT_SECRET,
        "LETHE_FILE_LINK_SECRET": "client-tests-link-secret-of-sufficient-lengt",
        "LETHE_FILE_PART_SIZE": "5MiB",
        "LETHE_SCAN_CLAMD_ADDRESS": roomy_clamd.address,
        "LETHE_SCAN_MAX_SIZE": "64MiB",
        "LETHE_API_CORS_ORIGINS": f"http://127.0.0.1:{page_port}",
        "LETHE_WEBHOOKS_ENDPOINTS": json.dumps(
            [{"name": "app", "url": hooks.url, "secret": CLIENT_HOOK_KEY, "events": list(EVENTS)}]
        ),
    }
    if request.param == "seaweed":
        endpoint = request.getfixturevalue("seaweed_server")
        bucket = make_s3_store(endpoint, versioned=True, server="seaweed").bucket
        env.update(
            {
                "LETHE_FILE_STORAGE_DRIVER": "s3",
                "LETHE_FILE_S3_ENDPOINT": endpoint,
                "LETHE_FILE_S3_BUCKET": bucket,
                "LETHE_FILE_S3_ACCESS_KEY": "testing",
                "LETHE_FILE_S3_SECRET_KEY": "testing",
                "LETHE_FILE_S3_SECURE": "false",
                # Unsealed, with downloads by redirect: the clients follow a 302 to the store and send direct
                # uploads' parts to it (fs keeps a new installation's sealing).
                "LETHE_FILE_ENCRYPTION": "false",
                "LETHE_FILE_S3_DOWNLOAD": "redirect",
            }
        )
    role = Role(["dev", "--port", str(port)], env, tmp_path / "dev.log", cwd=tmp_path)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", role)
        yield ClientDev(f"http://127.0.0.1:{port}", hooks, role, page_port, request.param)
    finally:
        role.stop()
        hooks.close()
