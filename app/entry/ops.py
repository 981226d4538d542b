"""The operator commands of `lethe` (D16): one-shot work on the database and the store, run by
hand. Each prints its report on stdout as a readable table (or one JSON object with --json), its logs on
stderr, and a progress bar on a terminal. Without database.url they use the `lethe dev` running from the same
folder (./.lethe/dev.json), or exit 2 saying what to run."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from app.entry.support import (
    EXIT_CONFIG,
    check_database_or_exit,
    inspect_store_or_exit,
    load_config_or_exit,
    setup_role_logging,
)

if TYPE_CHECKING:
    from app.platform.config.tree import Config
    from app.runtime import Runtime


NO_DATABASE = (
    "lethe: bad configuration:\n  database.url (LETHE_DATABASE_URL): Required by this command.\n"
    "  Either run it from the folder where `make run` (lethe dev) is running, so it finds that "
    "server through ./.lethe/, or start one there first:  make run\n"
    "  or point it at your database:  LETHE_DATABASE_URL=postgresql://user@host:5432/db lethe ..."
)


def _attach_to_dev(cfg: Config) -> tuple[Config, bool]:
    """Without database.url, an operator command uses the `lethe dev` running from this folder (its database, fs
    root, keyring and secret: app/entry/dev.py as_the_running_dev); else it exits 2 saying what to run. Returns
    the configuration and whether it attached."""
    if cfg.database.url:
        return cfg, False
    from app.entry.dev import as_the_running_dev

    attached = as_the_running_dev(cfg)
    if attached is None:
        print(NO_DATABASE, file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    return attached, True


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Run one cleanup in the foreground and print what each step did (or, with --dry-run, would do); --json
    prints one object."""

    runtime = _one_shot_runtime("cleanup", commits=not args.dry_run)
    from app.lifecycle.cleanup import run_cleanup
    from app.lifecycle.steps import STEPS

    bar = _progress_bar("cleanup", "step", args.json, total=len(STEPS))
    try:
        report = run_cleanup(
            runtime, dry_run=args.dry_run, on_step=(lambda step: bar.update(1)) if bar is not None else None
        )
    finally:
        if bar is not None:
            bar.close()
        runtime.close()
    if not report.ran:
        print(json.dumps({"ran": False}) if args.json else "another cleanup is running; nothing done")
        return 1
    if args.json:
        print(
            json.dumps(
                {"ran": True, "dry_run": args.dry_run, "steps": [dataclasses.asdict(step) for step in report.steps]}
            )
        )
        return 1 if report.first_error else 0
    verb = "would act on" if args.dry_run else "acted on"
    print(f"cleanup{' (dry run: nothing changed)' if args.dry_run else ''}:")
    for step in report.steps:
        line = (
            f"  {step.step}. {step.name:<17} candidates {step.candidates:>7}  {verb} {step.acted:>7}  "
            f"kept {step.kept:>7}  failed {step.failed:>5}"
        )
        if step.error:
            line += f"  (ended early: {step.error})"
        print(line)
    return 1 if report.first_error else 0


def _progress_bar(desc: str, unit: str, as_json: bool, total: int | None = None) -> Any:
    """A progress bar on stderr when it is a terminal and the output is for people (tqdm), else None."""
    if as_json or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=f" {unit}", file=sys.stderr, leave=False)


def _one_shot_runtime(name: str, needs_store: bool = True, commits: bool = True) -> Runtime:
    """The runtime of an operator command: configuration, database, logs on stderr (console on a terminal),
    the report on stdout. `commits`: whether the command may commit jobs (a read-only one says nothing of the
    broker)."""
    cfg, attached = _attach_to_dev(load_config_or_exit(name))
    check_database_or_exit(cfg.database.url)  # refused, unknown, authentication, not migrated: say so, exit 2
    setup_role_logging(name, cfg, fmt="console" if sys.stderr.isatty() else None, stream=sys.stderr)
    if needs_store:
        inspect_store_or_exit(cfg, name)
    from app.entry.wiring import build_runtime
    from app.platform.jobs.broker import build_broker

    runtime = build_runtime(cfg, build_broker(cfg.broker.url, cfg.broker.queue_type), role=name)
    if not cfg.broker.url:
        # Without RabbitMQ nobody consumes what this process would publish (an in-process broker dies with
        # it): the jobs stay in the outbox, committed, and a relay sends them (D9, D19).
        runtime.db.after_commit = None
        if commits:
            print(
                DEV_RELAYS.format(
                    seconds=int(cfg.outbox.relay_interval.total_seconds() + cfg.outbox.relay_age.total_seconds())
                )
                if attached
                else NO_BROKER,
                file=sys.stderr,
            )
    return runtime


T = TypeVar("T")

DEV_RELAYS = (
    "lethe: the jobs this command commits go through the running lethe dev (its relay sends them within "
    "about {seconds} s)."
)
NO_BROKER = (
    "lethe: broker.url (LETHE_BROKER_URL) is not set: the jobs this command commits (purges, scans, "
    "erasure rounds) stay in the outbox until a relay sends them: the scheduler (lethe scheduler) or a "
    "running lethe dev. Set broker.url to send them at once."
)


def uuid_arg(text: str) -> uuid.UUID:
    """argparse type: a UUID; the error names the argument, never echoes the value."""

    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a UUID") from None


def _chosen(items: Iterable[T], wanted: str | None, attribute: str, what: str) -> list[T]:
    if wanted is None:
        return list(items)
    chosen = [item for item in items if getattr(item, attribute) == wanted]
    if not chosen:
        print(f"lethe: no {what} of that name is configured", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    return chosen


def cmd_retention_run(args: argparse.Namespace) -> int:
    """Run retention policies now (their schedules aside; the cadence gate holds unless --force)."""
    runtime = _one_shot_runtime("retention", needs_store=False, commits=not args.dry_run)
    from app.lifecycle.retention import run_policy

    failed = False
    reports = []
    try:
        policies = _chosen(runtime.cfg.retention.policies, args.policy, "name", "retention policy")
        if not policies and not args.json:
            print("no retention policies are configured (retention.policies)")
        for policy in policies:
            report = run_policy(runtime, policy, dry_run=args.dry_run, force=args.force)
            reports.append(
                {
                    "policy": policy.name,
                    "ran": report.ran,
                    "dry_run": args.dry_run,
                    "skipped_reason": report.skipped_reason,
                    "retired": report.count("retired"),
                    "deleted": report.count("deleted"),
                    "failed": sum(s.failed for s in report.steps),
                    "error": report.error,
                }
            )
            failed = failed or bool(report.error) or reports[-1]["failed"] > 0
            if args.json:
                continue
            if not report.ran:
                last = report.last_run_at.isoformat() if report.last_run_at else "never"
                print(f"{policy.name}: skipped (within min_interval of the last run, {last}; --force runs it)")
                continue
            verb = "would retire" if args.dry_run else "retired"
            verb2 = "would delete" if args.dry_run else "deleted"
            failed_count = sum(step.failed for step in report.steps)
            print(
                f"{policy.name}{' (dry run: nothing changed)' if args.dry_run else ''}: {verb} "
                f"{report.count('retired')}, {verb2} {report.count('deleted')}, failed {failed_count}"
                + (f" (ended early: {report.error})" if report.error else "")
            )
    finally:
        runtime.close()
    if args.json:
        print(json.dumps({"policies": reports}))
    return 1 if failed else 0


def cmd_retention_restore(args: argparse.Namespace) -> int:
    """Bring a retired file back (D16); its age starts again now."""
    from app.errors import Conflict, NotFound

    file_id = args.file_id
    runtime = _one_shot_runtime("retention", needs_store=False)
    from app.lifecycle.retention import restore_file

    try:
        restore_file(runtime, None, file_id)
    except NotFound:
        print("no such file", file=sys.stderr)
        return 1
    except Conflict as exc:
        print(f"not restored: {exc.reason}", file=sys.stderr)
        return 1
    finally:
        runtime.close()
    print("restored; its age starts again now")
    return 0


def cmd_sweep_run(args: argparse.Namespace) -> int:
    runtime = _one_shot_runtime("sweep", commits=False)  # a sweep deletes in place and commits no job
    from app.errors import StorageError
    from app.lifecycle.sweeps import run_sweep

    failed = False
    reports = []
    try:
        prefixes = _chosen(runtime.cfg.storage.unmanaged_prefixes, args.prefix, "prefix", "unmanaged prefix")
        if not prefixes and not args.json:
            print("no unmanaged prefixes are configured (storage.unmanaged_prefixes)")
        for unmanaged in prefixes:
            bar = _progress_bar(unmanaged.prefix, "objects", args.json)
            try:
                report = run_sweep(
                    runtime,
                    unmanaged,
                    dry_run=args.dry_run,
                    progress=(lambda n: bar.update(n - bar.n)) if bar is not None else None,
                )
            except StorageError as exc:
                print(f"{unmanaged.prefix}: the store failed ({exc}); run it again", file=sys.stderr)
                failed = True
                continue
            finally:
                if bar is not None:
                    bar.close()
            failed = failed or report.failed > 0
            reports.append({**dataclasses.asdict(report), "created_before": report.created_before.isoformat()})
            if args.json:
                continue
            verb = "would delete" if args.dry_run else "deleted"
            print(
                f"{unmanaged.prefix}{' (dry run: nothing changed)' if args.dry_run else ''}: listed "
                f"{report.listed}, {verb} {report.deleted}, kept {report.newer} written after "
                f"{report.created_before.isoformat()}, skipped {report.invalid} unaddressable, failed "
                f"{report.failed}, {report.batches} batches, {report.directories} directories removed"
            )
    finally:
        runtime.close()
    if args.json:
        print(json.dumps({"prefixes": reports}))
    return 1 if failed else 0


def cmd_audit(args: argparse.Namespace) -> int:
    grace = args.grace
    runtime = _one_shot_runtime("audit", commits=False)  # --delete too: it removes in place, commits no job
    from app.lifecycle.audit import run_audit

    bar = _progress_bar("listing", "objects", args.json)
    seen = [0]

    def progress(listed: int) -> None:
        if bar is not None:
            bar.update(listed - seen[0])
            seen[0] = listed

    try:
        report = run_audit(runtime, delete=args.delete, grace=grace, progress=progress)
    finally:
        if bar is not None:
            bar.close()
        runtime.close()
    if args.json:
        print(json.dumps(report.as_dict()))
        return 0
    print(f"audit of f/ and uploads/: {report.listed} objects listed")
    for label, finding in (
        ("orphans (objects, no row)", report.orphans),
        ("objects of deleted rows", report.deleted_present),
        ("deliverable rows, original missing", report.missing_originals),
        ("multipart uploads, no open session", report.uploads_orphaned),
    ):
        shown = ", ".join(finding.file_ids[:10]) + (" ..." if finding.count > 10 else "")
        print(f"  {label:<36} {finding.count:>8}  {shown}")
    print(f"  {'keys outside the schema':<36} {report.unrecognized:>8}")
    if args.delete:
        print(
            f"  orphans deleted {report.orphans_deleted}, younger than the grace {report.orphans_too_young}, "
            f"failed {report.orphans_failed}; multipart uploads aborted {report.uploads_aborted}"
        )
    return 0


def cmd_receipt(args: argparse.Namespace) -> int:
    """Print a purged file's receipt (D16), as `field: value` lines or one JSON object."""

    from app.errors import NotFound

    file_id = args.file_id
    runtime = _one_shot_runtime("receipt", needs_store=False, commits=False)
    from app.lifecycle.receipts import receipt_of

    try:
        row = receipt_of(runtime, None, file_id)
    except NotFound:
        print("no receipt: the file is not purged yet, unknown, or its receipt expired", file=sys.stderr)
        return 1
    finally:
        runtime.close()
    fields = _printable(row)
    if args.json:
        print(json.dumps(fields))
    else:
        for name, value in fields.items():
            print(f"{name + ':':<23} {value}")
    return 0


def case_ref_arg(text: str) -> str:
    """argparse type: a case reference's outer form (the configured pattern is checked when the hold is placed);
    the error states the form, never echoes the value."""
    from app.domain.holds import CASE_REF_TOKEN, valid_case_ref

    if not valid_case_ref(text, CASE_REF_TOKEN):
        raise argparse.ArgumentTypeError("must be 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-' (a ticket number)")
    return text


def _printable(row: Any, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """A row as JSON-ready fields: times as ISO 8601, ids as text, and no null (as the API answers, D6)."""
    return {
        name: (
            value.isoformat() if hasattr(value, "isoformat") else str(value) if isinstance(value, uuid.UUID) else value
        )
        for name, value in dataclasses.asdict(row).items()
        if value is not None and name not in leave_out
    }


def _print_hold(fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        print(f"{name + ':':<16} {value}")


def cmd_hold(args: argparse.Namespace) -> int:
    """Legal holds: place, list, release; `field: value` lines, a table, or JSON."""
    from app.errors import Invalid, NotFound
    from app.lifecycle import holds

    runtime = _one_shot_runtime("hold", needs_store=False, commits=args.hold_command != "list")
    try:
        if args.hold_command == "place":
            try:
                row = holds.place_hold(runtime, None, args.case_ref, subject_id=args.subject, file_id=args.file)
            except NotFound:
                print("no such file (never uploaded, or purged already)", file=sys.stderr)
                return 1
            except Invalid:
                print(
                    "lethe hold place: --case-ref must be a ticket number of the form holds.case_ref_pattern "
                    "sets (for example CASE-2026-0042), never a name",
                    file=sys.stderr,
                )
                return 2
            fields = _printable(row)
        elif args.hold_command == "release":
            try:
                row, freed = holds.release_hold(runtime, None, args.hold_id)
            except NotFound:
                print("no such hold (unknown, or its record expired)", file=sys.stderr)
                return 1
            fields = {**_printable(row), "files_sent_to_purge": freed}
        else:
            rows, after = [], None
            while True:  # every hold, page by page
                page = holds.list_holds(runtime, None, after, 1000)
                rows += page
                if len(page) < 1000:
                    break
                after = page[-1].id
            if args.json:
                print(json.dumps({"holds": [_printable(row) for row in rows]}))
            else:
                print(f"{'id':<36}  {'target':<7}  {'case_ref':<20}  {'state':<8}  files_deferred")
                for row in rows:
                    print(
                        f"{row.id!s:<36}  {'file' if row.file_id else 'subject':<7}  {row.case_ref:<20}  "
                        f"{'released' if row.released_at else 'active':<8}  {row.files_deferred}"
                    )
            return 0
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(fields))
    else:
        _print_hold(fields)
    return 0


def cmd_webhooks(args: argparse.Namespace) -> int:
    """Webhook deliveries: the latest (or the failed ones) as a table or JSON; send one again."""
    from app.lifecycle import webhooks

    redeliver = args.webhooks_command == "redeliver"
    runtime = _one_shot_runtime("webhooks", needs_store=False, commits=False)
    outcome = None
    try:
        if redeliver:
            delivery_id = args.delivery_id
            row = webhooks.redeliver(runtime, delivery_id)
            if row is None:
                print("no such delivery (unknown, or older than webhooks.delivery_ttl)", file=sys.stderr)
                return 1
            if not runtime.cfg.broker.url and row.endpoint in {e.name for e in runtime.cfg.webhooks.endpoints}:
                # No worker takes the job at once: this command attempts it itself (the delivery's lease keeps
                # any other attempt out meanwhile), within webhooks.timeout.
                report = webhooks.deliver(runtime, [delivery_id])
                outcome = next(iter(report.outcomes), None)
                row = webhooks.delivery(runtime, delivery_id) or row
            rows = [row]
        else:
            rows = webhooks.list_deliveries(runtime, failed_only=args.failed, limit=args.limit)
    finally:
        runtime.close()
    shown = [_printable(row, leave_out=("data",)) for row in rows]  # ids, endpoint, type, attempts: never the data
    if args.json:
        print(json.dumps(shown[0] if args.webhooks_command == "redeliver" else {"deliveries": shown}))
        return 0
    if redeliver:
        if outcome is None:
            print(f"delivery {shown[0]['id']}: pending again; a worker sends it at once with the same webhook-id")
        else:
            print(
                f"delivery {shown[0]['id']}: sent again with the same webhook-id: {outcome} (state {shown[0]['state']})"
            )
        return 0
    print(f"{'id':<36}  {'endpoint':<16}  {'event_type':<17}  {'state':<9}  attempts  last")
    for row in rows:
        last = row.last_status if row.last_status is not None else (row.last_error or "")
        print(f"{row.id!s:<36}  {row.endpoint:<16}  {row.event_type:<17}  {row.state:<9}  {row.attempts:<8}  {last}")
    return 0


def limit_arg(text: str) -> int:
    """argparse type: a count from 1 to 10000."""
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError("must be a number from 1 to 10000")
    return int(text)


def duration_arg(text: str) -> timedelta:
    """argparse type: a duration such as 90s, 1h or 7d."""
    from app.platform.config import parse_duration

    try:
        return timedelta(seconds=parse_duration(text))
    except ValueError:
        raise argparse.ArgumentTypeError("must be a duration such as 1h or 7d") from None


def delivery_arg(text: str) -> uuid.UUID:
    """argparse type: a delivery id, as a UUID or as its webhook-id (msg_<hex>)."""
    return uuid_arg(text[4:] if text.startswith("msg_") else text)


def cmd_erase(args: argparse.Namespace) -> int:
    """Erase a subject (D16): start (or join) the erasure; with --wait, run its rounds here until it ends,
    with progress on a terminal."""

    subject = args.subject
    runtime = _one_shot_runtime("erase")
    from app.errors import Conflict, Invalid
    from app.lifecycle.erasure import erase_round, erasure_of, request_erasure

    try:
        try:
            row = request_erasure(runtime, None, subject)
        except Invalid:
            print("not erased: the all-zero id is the installation's own (its logo slot), no person", file=sys.stderr)
            return 2
        except Conflict as exc:
            # GDPR 17(3)(e): a legal hold covers the subject; request the erasure again after its release.
            print(f"not erased: {exc.reason} (a legal hold covers the subject; see lethe hold list)", file=sys.stderr)
            return 1
        if not args.json:
            print(f"erasure {row.id}: {row.state}")
        if not args.wait:
            if args.json:
                print(json.dumps({"id": str(row.id), "state": row.state}))
            elif runtime.cfg.broker.url:
                print("a worker runs it; follow it with GET /api/v1/erasures/{id} or lethe erase --wait")
            else:
                print(
                    "its job waits in the outbox for a relay (lethe scheduler or lethe dev) and a worker; "
                    "or run its rounds here: lethe erase --wait"
                )
            return 0
        state = row.state
        while state == "running":
            state = erase_round(runtime, row.id)
            current, receipts = erasure_of(runtime, None, row.id)
            print(
                f"  {state}: files marked {current.files_marked}, purged {current.files_purged}, keys confirmed "
                f"absent {current.keys_confirmed_absent}, messages removed {current.messages_removed}, drafts "
                f"removed {current.drafts_removed}",
                file=sys.stderr if sys.stderr.isatty() or args.json else sys.stdout,
            )
            if state == "running":
                time.sleep(2)  # the store refused a key or a purge is under way: the next round in a moment
        current, _ = erasure_of(runtime, None, row.id)
    finally:
        runtime.close()
    if args.json:
        print(
            json.dumps(
                {
                    name: str(value)
                    if name in ("id", "subject_id") and value
                    else value.isoformat()
                    if hasattr(value, "isoformat")
                    else value
                    for name, value in dataclasses.asdict(current).items()
                }
            )
        )
    else:
        print(f"erasure {current.id}: {current.state}" + (f" ({current.reason})" if current.reason else ""))
    return 0 if current.state == "complete" else 1
