"""`lethe erase`: everything Lethe holds of a person, erased."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from app.entry.ops import one_shot_runtime, uuid_arg


def cmd_erase(args: argparse.Namespace) -> int:
    """Erase a subject (D16): start (or join) the erasure; with --wait, run its rounds here until it ends,
    with progress on a terminal."""

    subject = args.subject
    runtime = one_shot_runtime("erase")
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


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe erase`."""
    erase = commands.add_parser("erase", help="erase everything Lethe holds of a person (D16)")
    erase.add_argument("--subject", required=True, type=uuid_arg, help="the principal, a UUID")
    erase.add_argument("--wait", action="store_true", help="run the erasure here until it ends")
    erase.add_argument("--json", action="store_true", help="print one JSON object")
    erase.set_defaults(func=cmd_erase)
