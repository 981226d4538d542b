"""`lethe restore`: the deletion journal against the database. `status` says where the database stands;
`reconcile` applies the journal again after a restore of a backup (`--dry-run`: counts only; `--accept-damaged`:
go past a damaged segment, applying what can be read of it); `adopt` takes another installation's journal as this
database's own (a database restored from a backup older than its journal); `foreign` says one is not.

Exit 0: the database stands at its journal's head (status), or the journal was applied (reconcile). Exit 1: the
database is behind its journal, or waits for an adoption (status). Exit 2: the journal is damaged or cannot be read,
each said in one sentence that names the segment and the line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from app.entry.support import EXIT_CONFIG


def cmd_restore(args: argparse.Namespace) -> int:
    from app.entry.ops import one_shot_runtime
    from app.errors import NotFound, StorageError
    from app.lifecycle import journal, restore

    command = args.restore_command
    changes = command in ("adopt", "foreign") or (command == "reconcile" and not args.dry_run)
    runtime = one_shot_runtime("restore", needs_store=True, commits=changes)
    try:
        if command == "status":
            shown = journal.status(runtime)
        elif command == "reconcile":
            shown = restore.reconcile(runtime, dry_run=args.dry_run, accept=args.accept_damaged or ()).as_dict()
            if not args.dry_run:
                shown["written"] = journal.flush(runtime)
        elif command == "adopt":
            shown = {
                "adopted": str(args.installation_id),
                "was": str(journal.adopt(runtime, args.installation_id)),
                "next": "lethe restore reconcile (or wait for the scheduler, with journal.auto_reconcile)",
            }
        else:
            journal.refuse(runtime, args.installation_id)
            shown = {"foreign": str(args.installation_id)}
    except restore.JournalDamaged as exc:
        print(
            f"lethe restore: the deletion journal is damaged: {exc.damage.describe()}. Put the segment back from a "
            "copy or an earlier version of it and run reconcile again; if no copy exists, docs/operations.md ('A "
            "damaged journal') says what accepting its loss means: lethe restore reconcile --accept-damaged "
            f"'{exc.damage.where}'",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    except NotFound:
        print(f"lethe restore: the store holds no journal of installation {args.installation_id}", file=sys.stderr)
        return EXIT_CONFIG
    except StorageError as exc:
        print(
            f"lethe restore: the deletion journal cannot be read ({type(exc).__name__}): check file.storage.* "
            "and the store",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    finally:
        runtime.close()
    _show(shown, args.json)
    if command == "status":
        if shown["damaged"]:
            damaged = shown["damaged"]
            where = damaged["where"] + (f", line {damaged['line']}" if damaged.get("line") else "")
            print(f"lethe restore: the deletion journal is damaged: {where}: {damaged['what']}", file=sys.stderr)
            return EXIT_CONFIG
        return 1 if shown["reason"] is not None else 0
    return 0


def _show(shown: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(shown))
        return
    for name, value in shown.items():
        print(f"{name}: {value}")


def _installation(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "must be an installation id (a UUID, as lethe restore status lists them)"
        ) from None


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe restore ...` on the command's parser."""
    restore = commands.add_parser("restore", help="the deletion journal against a restored database")
    restore_commands = restore.add_subparsers(dest="restore_command", required=True)
    status = restore_commands.add_parser(
        "status", help="where the database stands against its journal (exit 1: behind it; exit 2: damaged)"
    )
    reconcile = restore_commands.add_parser("reconcile", help="apply the journal again after a restore")
    reconcile.add_argument("--dry-run", action="store_true", help="count what would be applied; change nothing")
    reconcile.add_argument(
        "--accept-damaged",
        action="append",
        metavar="WHERE",
        help="go past this damage (a segment's key, or missing numbers, as the error names "
        "them), applying what can be read; see docs/operations.md first",
    )
    adopt = restore_commands.add_parser(
        "adopt",
        help="take another installation's journal as this database's own "
        "(restored from a backup older than its journal)",
    )
    foreign = restore_commands.add_parser(
        "foreign", help="say that another installation's journal in the store is not this database's"
    )
    for sub in (adopt, foreign):
        sub.add_argument("installation_id", type=_installation)
    for sub in (status, reconcile, adopt, foreign):
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        sub.set_defaults(func=cmd_restore)
