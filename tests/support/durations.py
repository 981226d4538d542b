"""How long each room of the suite takes (seconds of one xdist worker, a whole run at three workers on 2 cores,
2026-12-06), for the scheduler to start the longest first: handed out in collection order, the store drill or
the throttled store could begin when the other workers are nearly done, and the run waits for them alone.

A room missing here weighs by its number of tests; the figures only order the rooms, so stale ones cost time,
never a test. Refresh them from a run's durations when a room's weight changes much."""

from __future__ import annotations

MEASURED = {
    "e2e": 366,
    "faults": 199,
    "tests/integration/test_store_drill.py": 82,
    "tests/integration/test_restore_drills.py": 49,
    "tests/integration/test_encryption.py": 45,
    "tests/integration/test_cleanup.py": 42,
    "tests/journeys/test_upgrade.py": 42,
    "tests/integration/test_suite_services.py": 38,
    "tests/integration/test_deletion.py": 37,
    "tests/integration/test_one_rule.py": 36,
    "tests/integration/test_throttled_store.py": 33,
    "tests/integration/test_tus.py": 28,
    "tests/integration/test_direct_uploads.py": 26,
    "tests/integration/test_webhooks.py": 25,
    "tests/integration/test_upgrades.py": 22,
    "tests/integration/test_serving.py": 21,
    "tests/integration/test_storage_conformance.py": 20,
    "tests/integration/test_every_file_ends.py": 20,
    "tests/integration/test_erasure.py": 19,
    "tests/journeys/test_stop_and_restore.py": 18,
    "tests/integration/test_lifecycle_plans.py": 17,
    "tests/integration/test_stores.py": 16,
    "tests/integration/test_variants.py": 16,
    "tests/journeys/test_first_hour.py": 15,
    "tests/integration/test_api_schema.py": 14,
    "tests/integration/test_database_url_forms.py": 14,
    "tests/integration/test_strip.py": 14,
    "tests/journeys/test_image_shared.py": 13,
    "tests/integration/test_purge_isolation.py": 12,
    "tests/integration/test_api_world.py": 12,
    "tests/integration/test_api_uploads.py": 12,
    "tests/integration/test_holds.py": 11,
    "tests/unit/test_config.py": 11,
    "tests/integration/test_schedules.py": 11,
    "tests/integration/test_journal.py": 11,
    "tests/integration/test_batch_delete.py": 10,
}
SECONDS_PER_TEST = 0.2  # a test of the rooms not listed, on average


def weight(room: str, tests: int) -> float:
    """The expected seconds of a room of `tests` tests."""
    return MEASURED.get(room, tests * SECONDS_PER_TEST)
