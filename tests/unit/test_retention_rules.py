"""Pure rules of retention and sweeps (D16): parsing that names entries and fields but no value, the gate, the
decisions, the created-before bound, and cron firing times in a time zone across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.domain.retention import Policy, RetentionFacts, UnmanagedPrefix, delete_due, gate_open, retire_due, sweepable
from app.platform.config.entries import EntryErrors, cron_trigger, parse_policies, parse_prefixes

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
POLICY = Policy("exports", "gdpr_export", max_age=7 * DAY, grace=14 * DAY, schedule="0 23 * * sat")


def facts(**changes) -> RetentionFacts:
    base = dict(
        purpose="gdpr_export",
        upload_state="complete",
        deleted=False,
        retired_at=None,
        last_change_at=NOW - 7 * DAY,
        attached=False,
    )
    return RetentionFacts(**{**base, **changes})


def test_retire_and_delete_decisions():
    assert retire_due(facts(), POLICY, NOW)
    assert not retire_due(facts(last_change_at=NOW - 7 * DAY + timedelta(seconds=1)), POLICY, NOW)
    assert not retire_due(facts(upload_state="uploading"), POLICY, NOW)
    assert not retire_due(facts(purpose="avatar"), POLICY, NOW)
    assert not retire_due(facts(deleted=True), POLICY, NOW)
    assert not retire_due(facts(retired_at=NOW), POLICY, NOW)
    attachment = Policy("a", "attachment", 7 * DAY, DAY, "0 0 * * *")
    assert not retire_due(facts(purpose="attachment", attached=True), attachment, NOW)
    including = Policy("a", "attachment", 7 * DAY, DAY, "0 0 * * *", include_attached=True)
    assert retire_due(facts(purpose="attachment", attached=True), including, NOW)
    assert delete_due(facts(retired_at=NOW - 14 * DAY), POLICY, NOW)
    assert not delete_due(facts(retired_at=NOW - 14 * DAY + timedelta(seconds=1)), POLICY, NOW)
    assert not delete_due(facts(retired_at=None), POLICY, NOW)


def test_the_cadence_gate():
    assert gate_open(None, NOW, 13 * DAY)
    assert gate_open(NOW - DAY, NOW, None)
    assert not gate_open(NOW - 13 * DAY + timedelta(seconds=1), NOW, 13 * DAY)
    assert gate_open(NOW - 13 * DAY, NOW, 13 * DAY)


def test_the_created_before_bound_is_whole_seconds_and_moves_back_by_max_age():
    start = datetime(2026, 6, 1, 12, 0, 5, 700_000, tzinfo=UTC)
    wipe = UnmanagedPrefix("issues/", "0 0 1 * *")
    assert wipe.created_before(start) == datetime(2026, 6, 1, 12, 0, 5, tzinfo=UTC)
    aged = UnmanagedPrefix("issues/", "0 0 1 * *", max_age=DAY)
    assert aged.created_before(start) == datetime(2026, 5, 31, 12, 0, 5, tzinfo=UTC)
    bound = wipe.created_before(start)
    assert sweepable("issues/a", bound - timedelta(seconds=1), "issues/", bound)
    assert not sweepable("issues/a", bound, "issues/", bound)
    assert not sweepable("other/a", bound - DAY, "issues/", bound)
    assert not sweepable("issues/../f/x", bound - DAY, "issues/", bound)


def test_policy_errors_name_the_policy_and_field_never_the_value():
    secret = "hunter2-do-not-print"
    with pytest.raises(EntryErrors) as raised:
        parse_policies(
            [
                {"name": "exports", "purpose": "gdpr_export", "max_age": secret, "grace": "0s", "schedule": secret},
                {"name": secret.upper(), "purpose": secret, "max_age": "1d", "grace": "0s", "schedule": "0 0 * * *"},
            ]
        )
    text = " ".join(raised.value.messages)
    assert "policy exports: max_age" in text and "policy exports: schedule" in text
    assert "policy entry 2: name is required" in text and "policy entry 2: purpose" in text
    assert secret not in text and secret.upper() not in text


def test_policies_are_one_per_purpose_and_names_unique():
    base = {"purpose": "attachment", "max_age": "1d", "grace": "0s", "schedule": "0 0 * * *"}
    with pytest.raises(EntryErrors) as raised:
        parse_policies([{"name": "a", **base}, {"name": "a", **base, "purpose": "avatar"}, {"name": "b", **base}])
    text = " ".join(raised.value.messages)
    assert "policy a: name is used by another policy" in text and "policy b: purpose has another policy" in text
    with pytest.raises(EntryErrors):
        parse_policies([{"name": "x", **base, "purpose": "avatar", "include_attached": True}])
    assert parse_policies("[]") == ()


@pytest.mark.parametrize("prefix", ["f/", "f/x/", "uploads/", ".tmp/", "", "issues", "/abs/", "a/../b/", "a//b/"])
def test_a_prefix_that_overlaps_lethes_own_or_is_not_a_plain_path_is_refused(prefix):
    with pytest.raises(EntryErrors):
        parse_prefixes([{"prefix": prefix, "schedule": "0 0 * * *"}])


def test_declared_prefixes_may_not_overlap_each_other():
    with pytest.raises(EntryErrors) as raised:
        parse_prefixes([{"prefix": "a/", "schedule": "0 0 * * *"}, {"prefix": "a/b/", "schedule": "0 0 * * *"}])
    assert raised.value.messages == ["prefix entry 2: prefix overlaps prefix entry 1."]
    assert parse_prefixes([{"prefix": "a/", "schedule": "0 0 * * *"}, {"prefix": "ab/", "schedule": "0 0 * * *"}])


def fires(expression: str, zone: str, start: datetime, count: int) -> list[datetime]:
    """The first `count` firing times after start, as APScheduler's scheduler asks for them, in UTC."""
    trigger = cron_trigger(expression, ZoneInfo(zone))
    found, previous, now = [], None, start.astimezone(ZoneInfo(zone))
    for _ in range(count):
        nxt = trigger.get_next_fire_time(previous, now)
        found.append(nxt.astimezone(UTC))
        previous, now = nxt, (nxt.astimezone(UTC) + timedelta(seconds=1)).astimezone(ZoneInfo(zone))
    return found


def test_seed_003_saturday_23_00_in_kolkata_is_17_30_utc():
    # Asia/Kolkata has no DST: every Saturday 23:00 IST is 17:30 UTC
    found = fires("0 23 * * sat", "Asia/Kolkata", datetime(2026, 3, 1, tzinfo=UTC), 3)
    assert found == [
        datetime(2026, 3, 7, 17, 30, tzinfo=UTC),
        datetime(2026, 3, 14, 17, 30, tzinfo=UTC),
        datetime(2026, 3, 21, 17, 30, tzinfo=UTC),
    ]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_daily_cron_keeps_its_local_time_across_both_dst_changes_in_berlin():
    # 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET. 01:30 local every day:
    spring = fires("30 1 * * *", "Europe/Berlin", utc(2026, 3, 28), 3)
    assert spring == [utc(2026, 3, 28, 0, 30), utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 23, 30)]
    autumn = fires("30 1 * * *", "Europe/Berlin", utc(2026, 10, 24), 3)
    assert autumn == [utc(2026, 10, 24, 23, 30), utc(2026, 10, 26, 0, 30), utc(2026, 10, 27, 0, 30)]


def test_a_local_time_that_does_not_exist_fires_after_the_gap_and_a_repeated_one_twice():
    # 02:30 does not exist on 2026-03-29 in Berlin: it fires at 03:30 CEST, the hour after the gap
    spring = fires("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), 2)
    assert spring == [utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)]
    # 02:30 exists twice on 2026-10-25: it fires at both (APScheduler's rule; a run is idempotent, and a
    # policy's min_interval skips the second), then the next day
    autumn = fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 3)
    assert autumn == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)]
