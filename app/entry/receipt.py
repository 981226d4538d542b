"""`lethe receipt`: the name-free receipt of a purged file."""

from __future__ import annotations

import argparse
import json
import sys

from app.entry.ops import one_shot_runtime, printable, uuid_arg


def cmd_receipt(args: argparse.Namespace) -> int:
    """Print a purged file's receipt (D16), as `field: value` lines or one JSON object."""

    from app.errors import NotFound

    file_id = args.file_id
    runtime = one_shot_runtime("receipt", needs_store=False, commits=False)
    from app.lifecycle.receipts import receipt_of

    try:
        row = receipt_of(runtime, None, file_id)
    except NotFound:
        print("no receipt: the file is not purged yet, unknown, or its receipt expired", file=sys.stderr)
        return 1
    finally:
        runtime.close()
    fields = printable(row)
    if args.json:
        print(json.dumps(fields))
    else:
        for name, value in fields.items():
            print(f"{name + ':':<23} {value}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe receipt`."""
    receipt = commands.add_parser("receipt", help="the name-free receipt of a purged file (D16)")
    receipt.add_argument("file_id", type=uuid_arg)
    receipt.add_argument("--json", action="store_true", help="print one JSON object")
    receipt.set_defaults(func=cmd_receipt)
