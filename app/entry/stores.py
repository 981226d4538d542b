"""`lethe stores list | status | migrate`: the stores Lethe knows, what each holds, and moving every file to
another store while Lethe runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.entry.ops import one_shot_runtime


def _status(runtime: Any) -> dict[str, Any]:
    from app.db import stores as stores_sql

    now = runtime.clock.now()
    counts = {row.store: row for row in runtime.db.read(lambda conn: stores_sql.counts(conn, now))}
    latest = runtime.db.read(stores_sql.latest)
    names = runtime.store_names
    stores = []
    for name in names + sorted(set(counts) - set(names)):
        row = counts.get(name) or stores_sql.StoreCounts(name)
        stores.append(
            {
                "name": name,
                "configured": name in names,
                "primary": name == runtime.primary,
                "files": row.files,
                "bytes": row.bytes,
                "copies_being_made": row.copying,
                "copies_waiting_removal": row.left,
                "copies_due": row.left_due,
            }
        )
    migration = None
    if latest is not None:
        movable, waiting = runtime.db.read(
            lambda conn: stores_sql.waiting(conn, latest.id, latest.sources, latest.target)
        )
        failed = runtime.db.read(lambda conn: stores_sql.failures_of(conn, latest.id))
        migration = {
            "id": str(latest.id),
            "target": latest.target,
            "source": latest.source,
            "state": latest.state,
            "started_at": latest.started_at.isoformat(),
            "finished_at": latest.finished_at.isoformat() if latest.finished_at else None,
            "files_moved": latest.files_moved,
            "bytes_moved": latest.bytes_moved,
            "objects_copied": latest.copies_made,
            "files_failed": failed,
            "files_left": movable,
            "files_waiting": waiting,
        }
    return {"stores": stores, "migration": migration}


def _print_status(status: dict[str, Any]) -> None:
    for store in status["stores"]:
        marks = ("primary" if store["primary"] else "") + ("" if store["configured"] else "NOT CONFIGURED")
        print(
            f"{store['name']:<16} {store['files']} files, {store['bytes']} bytes; copies being made "
            f"{store['copies_being_made']}, waiting for removal {store['copies_waiting_removal']} "
            f"(due {store['copies_due']}) {marks}".rstrip()
        )
    migration = status["migration"]
    if migration is None:
        print("no migration has run")
        return
    print(
        f"migration {migration['id']} to {migration['target']} from {migration['source'] or 'every other store'}: "
        f"{migration['state']}; moved {migration['files_moved']} files, {migration['bytes_moved']} bytes; "
        f"{migration['files_left']} left to move, {migration['files_waiting']} waiting (an upload, scan or variants "
        f"under way), {migration['files_failed']} could not be copied"
    )


def cmd_stores(args: argparse.Namespace) -> int:
    """List the stores, say what each holds, or start (or stop) a migration; exit 1 when a file lies in a store
    that is not configured (list, status) or a migration is refused."""
    from app.lifecycle import stores

    runtime = one_shot_runtime("stores", needs_store=False, commits=args.stores_command == "migrate")
    try:
        if args.stores_command == "migrate":
            try:
                migration = stores.stop(runtime) if args.stop else stores.start(runtime, args.to, args.source)
            except stores.StoresRefused as exc:
                print(f"lethe stores migrate: {exc}")
                return 1
            if migration is None:
                print("no migration runs")
                return 0
            verb = "stopped" if args.stop else "runs"
            answer = {"id": str(migration.id), "target": migration.target, "source": migration.source, "state": verb}
            print(json.dumps(answer) if args.json else f"migration {migration.id} to {migration.target} {verb}")
            return 0
        status = _status(runtime)
    finally:
        runtime.close()
    if args.stores_command == "list":
        listed = [{key: store[key] for key in ("name", "configured", "primary", "files")} for store in status["stores"]]
        if args.json:
            print(json.dumps(listed))
        else:
            for store in listed:
                flags = ("primary " if store["primary"] else "") + ("" if store["configured"] else "NOT CONFIGURED")
                print(f"{store['name']:<16} {store['files']} files {flags}".rstrip())
    elif args.json:
        print(json.dumps(status))
    else:
        _print_status(status)
    return 1 if any(not store["configured"] and store["files"] for store in status["stores"]) else 0


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe stores`."""
    stores = commands.add_parser("stores", help="the object stores, and moving files between them")
    stores_commands = stores.add_subparsers(dest="stores_command", required=True)
    listing = stores_commands.add_parser("list", help="the stores configured, and those files lie in")
    status = stores_commands.add_parser("status", help="per store: files, bytes, copies; the last migration")
    migrate = stores_commands.add_parser("migrate", help="move every file to another store, in worker jobs")
    target = migrate.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", help="the store every file moves to (a name of file.stores, or default)")
    target.add_argument("--stop", action="store_true", help="stop the running migration (what moved stays)")
    migrate.add_argument("--from", dest="source", help="move only the files of this store (default: every other)")
    for sub in (listing, status, migrate):
        sub.add_argument("--json", action="store_true", help="print JSON")
        sub.set_defaults(func=cmd_stores)
