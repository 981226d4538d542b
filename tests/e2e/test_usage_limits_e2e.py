"""Usage limits across api replicas: two `lethe api` processes on one database take 50 concurrent createUploads
of one principal and reserve exactly up to its quota, never past it (the quota set by `lethe quota set` on the
host; `lethe quota show` and `lethe quota check` read what the api reserved); and they share one rate-limit count,
answering 429 with the RateLimit fields once the principal's requests to both pass the policy's quota."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

from app.entry.token import mint_token
from tests.support import zygote
from tests.support.helpers import rate_fields
from tests.support.ports import free_port
from tests.support.roles import start_api, wait_for_http

SECRET = "e2e-secret-of-sufficient-length-0123456789"


def lethe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """An operator's command on the host, beside the roles, with their environment (the roles' metrics directory
    too, which the first command runs before any role made)."""
    return zygote.run([sys.executable, "-m", "app.entry", *args], env=env, capture_output=True, text=True, timeout=120)


def two_apis(start_role, env: dict[str, str], tmp_path) -> list[str]:
    bases = []
    for n in range(2):
        env = dict(env, LETHE_API_PORT=str(free_port()), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / f"metrics-{n}"))
        api = start_api(start_role, env)
        base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
        wait_for_http(base + "/readyz", api)
        bases.append(base)
    return bases


def test_two_api_processes_never_reserve_past_a_principals_limit(start_role, role_env, tmp_path):
    person = uuid.uuid4()
    set_on_host = lethe(role_env, "quota", "set", str(person), "--max-files", "10", "--max-bytes", "1MiB")
    assert set_on_host.returncode == 0, set_on_host.stderr
    bases = two_apis(start_role, role_env, tmp_path)
    headers = {"Authorization": f"Bearer {mint_token(SECRET, person)}"}
    shown = requests.get(f"{bases[1]}/api/v1/principals/{person}/usage", headers=headers, timeout=10).json()
    assert shown["files"]["limit"] == 10 and shown["bytes"]["limit"] == 1024 * 1024

    def create(n: int) -> int:
        body: dict[str, Any] = {"name": "report.pdf", "size_bytes": 1000, "mime_type": "application/pdf"}
        return requests.post(f"{bases[n % 2]}/api/v1/uploads", json=body, headers=headers, timeout=60).status_code

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(create, range(50)))
    assert answers.count(201) == 10 and answers.count(413) == 40, answers
    shown = json.loads(lethe(role_env, "quota", "show", str(person), "--json").stdout)
    assert shown["files"]["reserved"] == 10 and shown["bytes"]["reserved"] == 10_000
    checked = lethe(role_env, "quota", "check")
    assert checked.returncode == 0 and "no drift" in checked.stdout


def test_two_api_processes_share_one_rate_limit_count(start_role, role_env, tmp_path):
    limited = dict(
        role_env, LETHE_RATE_LIMITS_LINKS="4/1h", LETHE_FILE_LINK_SECRET="e2e-link-secret-of-sufficient-length-0123"
    )
    bases = two_apis(start_role, limited, tmp_path)
    headers = {"Authorization": f"Bearer {mint_token(SECRET, uuid.uuid4())}"}
    answers = [
        requests.post(f"{bases[n % 2]}/api/v1/files/{uuid.uuid4()}/links", json={}, headers=headers, timeout=10)
        for n in range(6)
    ]
    assert [answer.status_code for answer in answers] == [404, 404, 404, 404, 429, 429]
    remaining = [rate_fields(answer.headers)[1]["r"] for answer in answers]
    assert remaining == [3, 2, 1, 0, 0, 0]
    assert answers[-1].json()["reason"] == "rate_limited" and int(answers[-1].headers["Retry-After"]) > 0
