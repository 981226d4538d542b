"""Crashes and leadership: a worker killed mid-purge, a scheduler leader killed, and a leader partitioned
from PostgreSQL and then killed (its session would otherwise hold the advisory lock for the server's TCP
keepalive, 2 hours by default)."""

from __future__ import annotations

import signal
import time

import pytest

from app.platform import config
from tests.faults.conftest import via

pytestmark = pytest.mark.faults
LEADS = '"event": "scheduler.leader"'
LEADER_TIMEOUT_S = 6.0  # the drills' schedule.leader_timeout (conftest); the default is 30s


def test_the_default_leader_timeout_hands_over_within_a_minute():
    """The standby takes the lock at most leader_timeout (the server ends the silent session) plus one ping
    interval (leader_timeout / 3) after the leader went silent."""
    timeout = config.load({}).schedule.leader_timeout.total_seconds()
    assert timeout + timeout / 3 < 60


def test_a_worker_killed_mid_purge_loses_nothing(stage_factory):
    stage = stage_factory(LETHE_FILE_GC_BATCH_SIZE="200")
    stage.start("scheduler")
    worker = stage.start("worker")
    ids = stage.seed(2000)
    stage.mark_deleted(ids)  # the catch-up purges them in batches of 200
    # When the worker is killed while the purge is under way
    stage.until(lambda: 0 < stage.rows_left(ids) < len(ids), 60, step=0.05)
    worker.stop(signal.SIGKILL)
    assert 0 < stage.rows_left(ids) < len(ids)
    # Then a new worker finishes it: no row and no object is left
    stage.start("worker")
    stage.wait_gone(ids, timeout=60)


def test_a_killed_leader_is_replaced_at_once(stage_factory):
    stage = stage_factory()
    leader = stage.start("scheduler")
    stage.until(lambda: LEADS in leader.output(), 20)
    standby = stage.start("scheduler", LETHE_DATABASE_URL=stage.database_url)
    stage.until(lambda: '"event": "scheduler.started"' in standby.output(), 20)
    assert LEADS not in standby.output()
    # A killed process closes its connection: the server frees the lock, the standby's next try takes it
    killed = time.monotonic()
    leader.stop(signal.SIGKILL)
    stage.until(lambda: LEADS in standby.output(), LEADER_TIMEOUT_S, step=0.1)
    assert time.monotonic() - killed < LEADER_TIMEOUT_S / 3 + 1


def test_a_leader_partitioned_then_killed_is_replaced_within_its_timeout(stage_factory):
    stage = stage_factory()
    leader = stage.start("scheduler")  # through the proxy
    stage.until(lambda: LEADS in leader.output(), 20)
    standby = stage.start("scheduler", LETHE_DATABASE_URL=stage.database_url)  # straight to PostgreSQL
    stage.until(lambda: '"event": "scheduler.started"' in standby.output(), 20)
    # The leader is cut off from PostgreSQL (nothing it sends arrives, not even its close), then killed
    stage.pg.blackhole()
    cut = time.monotonic()
    leader.stop(signal.SIGKILL)
    stage.until(lambda: LEADS in standby.output(), 3 * LEADER_TIMEOUT_S, step=0.2)
    took = time.monotonic() - cut
    # leader_timeout for the server to end the silent session, one standby tick, and a second of slack
    assert took < LEADER_TIMEOUT_S + LEADER_TIMEOUT_S / 3 + 1, took
    assert via(stage.database_url, stage.pg.address) != stage.database_url
