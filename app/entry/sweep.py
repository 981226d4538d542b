"""`lethe sweep run`: the sweeps of unmanaged prefixes, now."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from app.entry.ops import chosen, one_shot_runtime, progress_bar


def cmd_sweep_run(args: argparse.Namespace) -> int:
    runtime = one_shot_runtime("sweep", commits=False)  # a sweep deletes in place and commits no job
    from app.errors import StorageError
    from app.lifecycle.sweeps import run_sweep

    failed = False
    reports = []
    try:
        prefixes = chosen(runtime.cfg.storage.unmanaged_prefixes, args.prefix, "prefix", "unmanaged prefix")
        if not prefixes and not args.json:
            print("no unmanaged prefixes are configured (storage.unmanaged_prefixes)")
        for unmanaged in prefixes:
            bar = progress_bar(unmanaged.prefix, "objects", args.json)
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


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe sweep`."""
    sweep = commands.add_parser("sweep", help="sweeps of unmanaged prefixes (D16)")
    sweep_commands = sweep.add_subparsers(dest="sweep_command", required=True)
    sweep_run = sweep_commands.add_parser("run", help="sweep unmanaged prefixes now and print counts")
    sweep_run.add_argument("--prefix", help="only this declared prefix")
    sweep_run.add_argument("--dry-run", action="store_true", help="print what would happen; change nothing")
    sweep_run.add_argument("--json", action="store_true", help="print one JSON object")
    sweep_run.set_defaults(func=cmd_sweep_run)
