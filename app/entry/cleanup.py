"""`lethe cleanup`: one cleanup run now, in the foreground, with what each step did."""

from __future__ import annotations

import argparse
import dataclasses
import json

from app.entry.ops import one_shot_runtime, progress_bar


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Run one cleanup in the foreground and print what each step did (or, with --dry-run, would do); --json
    prints one object."""

    runtime = one_shot_runtime("cleanup", commits=not args.dry_run)
    from app.lifecycle.cleanup import run_cleanup
    from app.lifecycle.steps import STEPS

    bar = progress_bar("cleanup", "step", args.json, total=len(STEPS))
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


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe cleanup`."""
    cleanup = commands.add_parser("cleanup", help="run one cleanup now and print what each step did")
    cleanup.add_argument("--dry-run", action="store_true", help="print what each step would do; change nothing")
    cleanup.add_argument("--json", action="store_true", help="print one JSON object")
    cleanup.set_defaults(func=cmd_cleanup)
