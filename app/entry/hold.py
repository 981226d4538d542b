"""`lethe hold place | list | release`: legal holds."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.entry.ops import one_shot_runtime, printable, uuid_arg


def case_ref_arg(text: str) -> str:
    """argparse type: a case reference's outer form (the configured pattern is checked when the hold is placed);
    the error states the form, never echoes the value."""
    from app.domain.holds import CASE_REF_TOKEN, valid_case_ref

    if not valid_case_ref(text, CASE_REF_TOKEN):
        raise argparse.ArgumentTypeError("must be 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-' (a ticket number)")
    return text


def _print_hold(fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        print(f"{name + ':':<16} {value}")


def cmd_hold(args: argparse.Namespace) -> int:
    """Legal holds: place, list, release; `field: value` lines, a table, or JSON."""
    from app.errors import Invalid, NotFound
    from app.lifecycle import holds

    runtime = one_shot_runtime("hold", needs_store=False, commits=args.hold_command != "list")
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
            fields = printable(row)
        elif args.hold_command == "release":
            try:
                row, freed = holds.release_hold(runtime, None, args.hold_id)
            except NotFound:
                print("no such hold (unknown, or its record expired)", file=sys.stderr)
                return 1
            fields = {**printable(row), "files_sent_to_purge": freed}
        else:
            rows, after = [], None
            while True:  # every hold, page by page
                page = holds.list_holds(runtime, None, after, 1000)
                rows += page
                if len(page) < 1000:
                    break
                after = page[-1].id
            if args.json:
                print(json.dumps({"holds": [printable(row) for row in rows]}))
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


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe hold`."""
    hold = commands.add_parser("hold", help="legal holds: suspend the purge of a person's or a file's data")
    hold_commands = hold.add_subparsers(dest="hold_command", required=True)
    place = hold_commands.add_parser("place", help="place a hold on a subject or a file")
    target = place.add_mutually_exclusive_group(required=True)
    target.add_argument("--subject", type=uuid_arg, help="the principal, a UUID: every file they uploaded")
    target.add_argument("--file", type=uuid_arg, help="one file, a UUID")
    place.add_argument("--case-ref", required=True, type=case_ref_arg, help="a ticket number (never free text)")
    hold_list = hold_commands.add_parser("list", help="every hold, in force or released")
    release = hold_commands.add_parser("release", help="release a hold; the files it alone held are purged")
    release.add_argument("hold_id", type=uuid_arg)
    for sub in (place, hold_list, release):
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        sub.set_defaults(func=cmd_hold)
