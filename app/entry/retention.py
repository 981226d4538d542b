"""`lethe retention run | restore`: retention policies now, and a retired file brought back."""

from __future__ import annotations

import argparse
import json
import sys

from app.entry.ops import chosen, one_shot_runtime, uuid_arg


def cmd_retention_run(args: argparse.Namespace) -> int:
    """Run retention policies now (their schedules aside; the cadence gate holds unless --force)."""
    runtime = one_shot_runtime("retention", needs_store=False, commits=not args.dry_run)
    from app.lifecycle.retention import run_policy

    failed = False
    reports = []
    try:
        policies = chosen(runtime.cfg.retention.policies, args.policy, "name", "retention policy")
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
    runtime = one_shot_runtime("retention", needs_store=False)
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


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe retention`."""
    retention = commands.add_parser("retention", help="retention policies (D16)")
    retention_commands = retention.add_subparsers(dest="retention_command", required=True)
    retention_run = retention_commands.add_parser("run", help="run retention policies now and print counts")
    retention_run.add_argument("--policy", help="only this policy")
    retention_run.add_argument("--dry-run", action="store_true", help="print what would happen; change nothing")
    retention_run.add_argument("--force", action="store_true", help="ignore the cadence gate (min_interval)")
    retention_run.add_argument("--json", action="store_true", help="print one JSON object")
    retention_run.set_defaults(func=cmd_retention_run)
    restore = retention_commands.add_parser("restore", help="bring a retired file back")
    restore.add_argument("file_id", type=uuid_arg)
    restore.set_defaults(func=cmd_retention_restore)
