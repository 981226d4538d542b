"""The scheduler's D16 jobs: one cron job per retention policy and unmanaged prefix in schedule.timezone,
every 5 minutes under schedule.dev_fast, sent by the leader only; and the operator commands from a terminal."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from app.db.pool import Database
from scheduler.jobs import Leadership, register_jobs, send_job
from tests.support import zygote
from tests.support.keyring import SEALED_ENV
from tests.support.lethe import ALEX, OWNER

pytestmark = pytest.mark.one_store  # the store is not the point here

POLICY = {
    "name": "exports",
    "purpose": "gdpr_export",
    "max_age": "7d",
    "grace": "14d",
    "schedule": "0 23 * * sat",
    "min_interval": "13d",
}
PREFIX = {"prefix": "issues/", "schedule": "0 23 1 1,4,7,10 *"}
SETTINGS = {
    "retention.policies": json.dumps([POLICY]),
    "storage.unmanaged_prefixes": json.dumps([PREFIX]),
    "schedule.timezone": "Asia/Kolkata",
}


def jobs_of(lethe):
    scheduler = BackgroundScheduler(timezone=lethe.cfg.schedule.timezone)
    leadership = register_jobs(scheduler, lethe.rt, Leadership(lethe.rt.db))
    try:
        return {job.id: job for job in scheduler.get_jobs()}
    finally:
        leadership.release()


def test_every_policy_and_prefix_is_a_cron_job_in_the_time_zone(make_lethe):
    jobs = jobs_of(make_lethe(**SETTINGS))
    for job_id in ("retention.exports", "sweep.issues/"):
        trigger = jobs[job_id].trigger
        assert isinstance(trigger, CronTrigger) and str(trigger.timezone) == "Asia/Kolkata"
    assert jobs["retention.exports"].args[-1] == "exports" and jobs["sweep.issues/"].args[-1] == "issues/"


def test_dev_fast_runs_every_schedule_every_five_minutes(make_lethe):
    jobs = jobs_of(make_lethe(**SETTINGS, **{"schedule.dev_fast": "true"}))
    for job_id in ("retention.exports", "sweep.issues/"):
        assert isinstance(jobs[job_id].trigger, IntervalTrigger)
        assert jobs[job_id].trigger.interval == timedelta(minutes=5)


def test_two_scheduler_replicas_send_a_policy_run_once(make_lethe, database_url):
    lethe = make_lethe(**SETTINGS)
    first, second = Leadership(lethe.rt.db), Leadership(Database(database_url, pool_size=2))
    try:
        sent = [
            send_job(lethe.rt, leadership, "maintenance", "retention_run", "exports") for leadership in (first, second)
        ]
        assert sent == [True, False]
        messages = lethe.broker.take("retention_run")
        assert [m.args for m in messages] == [("exports",)]
        # The worker's actor runs it; a second delivery within min_interval is skipped by the stored gate
        lethe.run_jobs()
        from workers.actors import ACTORS

        ACTORS["retention_run"].fn(lethe.rt, "exports")
        from tests.support.helpers import rows

        assert len(rows(lethe, "schedule_runs")) == 1
    finally:
        first.release()
        second.release()


def test_the_operator_commands_print_counts(make_lethe, database_url, tmp_path):
    lethe = make_lethe(**SETTINGS)
    export = lethe.upload(OWNER, purpose="gdpr_export")
    lethe.upload(ALEX)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": "a-secret-of-sufficient-length-0",
        "LETHE_FILE_FS_ROOT": str(tmp_path / "cli-objects"),
        "LETHE_RETENTION_POLICIES": json.dumps([{**POLICY, "max_age": "1s"}]),
        "LETHE_STORAGE_UNMANAGED_PREFIXES": json.dumps([PREFIX]),
        **SEALED_ENV,
    }

    def lethe_cli(*args):
        return zygote.run(
            [sys.executable, "-m", "app.entry", *args], capture_output=True, text=True, env=env, timeout=60
        )

    dry = lethe_cli("retention", "run", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "exports (dry run: nothing changed): would retire 1, would delete 0" in dry.stdout
    real = lethe_cli("retention", "run", "--policy", "exports")
    assert "exports: retired 1, deleted 0" in real.stdout
    assert "skipped" in lethe_cli("retention", "run").stdout  # min_interval
    assert lethe_cli("retention", "run", "--policy", "nope").returncode == 2
    restored = lethe_cli("retention", "restore", export)
    assert restored.returncode == 0 and "restored" in restored.stdout
    assert lethe_cli("retention", "restore", export).returncode == 1  # not retired any more
    swept = lethe_cli("sweep", "run", "--dry-run")
    assert swept.returncode == 0 and "issues/ (dry run: nothing changed): listed 0" in swept.stdout
    as_json = json.loads(lethe_cli("sweep", "run", "--dry-run", "--json").stdout)
    assert as_json["prefixes"][0]["prefix"] == "issues/" and as_json["prefixes"][0]["dry_run"] is True
    policies = json.loads(lethe_cli("retention", "run", "--dry-run", "--json").stdout)["policies"]
    assert policies[0]["policy"] == "exports" and {"retired", "deleted", "ran"} <= set(policies[0])
    audit = lethe_cli("audit", "--json")
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["orphans"]["count"] == 0
    check = zygote.run(
        [sys.executable, "-m", "app.entry", "config", "check"],
        capture_output=True,
        text=True,
        env={**env, "LETHE_SCHEDULE_DEV_FAST": "true"},
        timeout=60,
    )
    assert check.returncode == 0 and "schedule.dev_fast is on" in check.stdout
    bad = zygote.run(
        [sys.executable, "-m", "app.entry", "config", "check"],
        capture_output=True,
        text=True,
        env={**env, "LETHE_RETENTION_POLICIES": '[{"name": "x", "purpose": "secret-value"}]'},
        timeout=60,
    )
    assert bad.returncode == 2 and "policy x: purpose" in bad.stdout and "secret-value" not in bad.stdout
