"""The S3 endpoint cut off during a purge: deletes still answer (they only write rows), the purge retries,
the backlog gauge and a warning show it, /readyz answers 503, and once S3 is back nothing is left."""

from __future__ import annotations

import pytest

from app.domain.keys import original_key
from tests.faults.conftest import log_lines, metric

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_an_s3_outage_holds_the_purge_back_and_loses_nothing(stage_factory, moto_server, mode):
    stage = stage_factory(
        driver="s3", s3_endpoint=moto_server, LETHE_PRIVACY_OBJECT_DELETE_DELAY="3s", LETHE_FILE_S3_TIMEOUT="1s"
    )
    roles = stage.start_all()
    ids = stage.seed(20)
    # The worker's restore guard has read the journal (a first cleanup ran) before the store goes: the drill is a
    # purge meeting the outage. A worker whose first look at the journal meets it holds every job back instead
    # (journal_unreadable), as it must: it cannot tell whether its database was restored.
    stage.until(lambda: any(line.get("event") == "cleanup.step" for line in log_lines(roles["worker"])), 30)
    getattr(stage.s3, mode)()

    # Deleting needs PostgreSQL only: every delete is accepted
    for file_id in ids:
        answer = stage.delete(file_id)
        assert answer.status == 204 and answer.seconds < 1, answer
    # readiness says the store is unreachable, quickly
    ready = stage.readyz()
    assert ready.status == 503 and ready.seconds < 2, ready
    assert "store" in ready.body["detail"]
    # the purge meets the outage: nothing is purged, the worker warns, the backlog gauge shows the files
    worker = roles["worker"]
    stage.until(
        lambda: any(
            line.get("event") in ("worker.dependency_unavailable", "cleanup.step_failed") for line in log_lines(worker)
        ),
        30,
    )
    stage.until(lambda: metric(worker.metrics_port, "lethe_file_purge_backlog") >= len(ids), 60)
    stage.until(lambda: any(line.get("event") == "cleanup.backlog_overdue" for line in log_lines(worker)), 60)
    assert stage.left(ids) == (len(ids), len(ids))

    # S3 comes back: the retries and the catch-up purge everything, no role restarted
    stage.s3.pass_()
    stage.wait_gone(ids, timeout=20)
    stage.until(lambda: stage.readyz().status == 200, 10)
    stage.assert_alive()
    for role in roles.values():
        output = role.output()
        assert "Traceback" not in output, output[-4000:]
        # D15: the retries of the HTTP client name URLs, and so object keys; none reaches a log
        assert not any(original_key(file_id) in output for file_id in ids)
        assert "prefix=" not in output and "/f/" not in output
