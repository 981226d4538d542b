"""`lethe audit`: what no row explains under f/ and uploads/ (read-only, or --delete past a grace)."""

from __future__ import annotations

import argparse
import json

from app.entry.ops import duration_arg, one_shot_runtime, progress_bar


def cmd_audit(args: argparse.Namespace) -> int:
    grace = args.grace
    runtime = one_shot_runtime("audit", commits=False)  # --delete too: it removes in place, commits no job
    from app.lifecycle.audit import run_audit

    bar = progress_bar("listing", "objects", args.json)
    seen = [0]

    def progress(listed: int) -> None:
        if bar is not None:
            bar.update(listed - seen[0])
            seen[0] = listed

    names = [args.store] if args.store else runtime.store_names
    try:
        if args.store and args.store not in runtime.store_names:
            print(f"lethe audit: no store named {args.store} is configured: {', '.join(runtime.store_names)}")
            return 2
        reports = [run_audit(runtime, delete=args.delete, grace=grace, progress=progress, store=name) for name in names]
    finally:
        if bar is not None:
            bar.close()
        runtime.close()
    if args.json:
        # One object: the primary store's report as before, and with several stores every store's under `stores`.
        document = reports[0].as_dict()
        if len(reports) > 1:
            document["stores"] = {report.store: report.as_dict() for report in reports}
        print(json.dumps(document))
        return 0
    for report in reports:
        print(f"audit of f/ and uploads/ in store {report.store}: {report.listed} objects listed")
        for label, finding in (
            ("orphans (objects, no row)", report.orphans),
            ("objects of deleted rows", report.deleted_present),
            ("deliverable rows, original missing", report.missing_originals),
            ("multipart uploads, no open session", report.uploads_orphaned),
            ("copies a migration records", report.copies),
            ("copies of files another store holds", report.elsewhere),
        ):
            shown = ", ".join(finding.file_ids[:10]) + (" ..." if finding.count > 10 else "")
            print(f"  {label:<36} {finding.count:>8}  {shown}")
        print(f"  {'keys outside the schema':<36} {report.unrecognized:>8}")
        if args.delete:
            print(
                f"  orphans deleted {report.orphans_deleted}, younger than the grace {report.orphans_too_young}, "
                f"failed {report.orphans_failed}; multipart uploads aborted {report.uploads_aborted}; copies of "
                f"files another store holds deleted {report.elsewhere_deleted}"
            )
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe audit`."""
    audit = commands.add_parser("audit", help="report what no row explains in f/ and uploads/ (read-only)")
    audit.add_argument("--json", action="store_true", help="print one JSON summary object")
    audit.add_argument("--delete", action="store_true", help="delete orphans older than --grace")
    audit.add_argument(
        "--grace", default="24h", type=duration_arg, help="with --delete: only orphans older than this (24h)"
    )
    audit.add_argument("--store", help="audit this store only (default: every store, the primary first)")
    audit.set_defaults(func=cmd_audit)
