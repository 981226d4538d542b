"""PostgreSQL cut off (connections reset, port refused) or partitioned (nothing answers, nothing is refused).

Required (issue 10): requests answer 503 `service_unavailable` with Retry-After within 5 s, /readyz 503 within
2 s, one warning line and no stack trace; once PostgreSQL is back, api, worker and scheduler recover within
10 s without a restart, and every file deleted around the outage is purged (no row, no object).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.faults.conftest import log_lines

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_a_database_outage_answers_fast_and_every_role_recovers(stage_factory, mode):
    stage = stage_factory()
    roles = stage.start_all()
    before, during = stage.seed(30), stage.seed(4)
    leads = stage.until(lambda: roles["scheduler"].output().count('"event": "scheduler.leader"'), 10)[0]

    # Files deleted just before the outage: their purge runs into it.
    for file_id in before:
        assert stage.delete(file_id).status == 204
    getattr(stage.pg, mode)()

    # While it lasts, clients get a fast, honest answer (four at once, as clients would ask)
    with ThreadPoolExecutor(len(during)) as pool:
        answers = list(pool.map(stage.delete, during))
    for answer in answers:
        assert answer.status == 503, answer
        assert answer.body["code"] == "service_unavailable"
        assert answer.headers["Retry-After"] == "5"
        assert answer.seconds < 5, answer
    ready = stage.readyz()
    assert ready.status == 503 and ready.seconds < 2, ready
    assert "database" in ready.body["detail"]

    # PostgreSQL comes back
    stage.pg.pass_()
    healed = time.monotonic()
    for file_id in during:  # the client retries after Retry-After
        stage.until(lambda file_id=file_id: stage.delete(file_id).status in (204, 404), 10)
    assert time.monotonic() - healed < 10
    assert stage.readyz().status == 200
    # the scheduler leads again (its session died with the outage), the worker purges: nothing was lost
    stage.until(lambda: roles["scheduler"].output().count('"event": "scheduler.leader"') > leads, 10)
    stage.wait_gone(before + during, timeout=10)
    stage.assert_alive()

    # One warning line per failed request, no stack trace in any role's output
    api_lines = log_lines(roles["api"])
    unavailable = [line for line in api_lines if line.get("event") == "api.database_unavailable"]
    assert len(unavailable) >= len(during) and all(line["level"] == "WARNING" for line in unavailable)
    for role in roles.values():
        assert "Traceback" not in role.output(), role.output()[-4000:]
