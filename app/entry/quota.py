"""`lethe quota set | show | check`: one principal's quota and usage, and the check of the usage counters."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.entry.ops import one_shot_runtime, uuid_arg

KEEP, DEFAULT = object(), "default"


def limit_arg(kind: str) -> Any:
    """argparse type of a limit: a count (bytes may carry a unit, 10GiB), `none` (no limit) or `default` (the
    installation's); the error states the form, never echoes the value."""

    def parse(text: str) -> int | str | None:
        from app.platform.config import parse_size

        if text in ("none", DEFAULT):
            return None if text == "none" else DEFAULT
        try:
            value = parse_size(text) if kind == "bytes" else int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(
                f"must be {'a size (10GiB)' if kind == 'bytes' else 'a whole number'}, none or default"
            )
        return value

    return parse


def _changed(document: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The principal's document with the limits the command names changed (`default`: left out)."""
    document = json.loads(json.dumps(document))  # a copy
    target = document.setdefault("purposes", {}).setdefault(args.purpose, {}) if args.purpose else document
    for name, value in (("max_bytes", args.max_bytes), ("max_files", args.max_files)):
        if value is KEEP:
            continue
        if value == DEFAULT:
            target.pop(name, None)
        else:
            target[name] = value
    document["purposes"] = {purpose: limits for purpose, limits in document.get("purposes", {}).items() if limits}
    if not document["purposes"]:
        del document["purposes"]
    return document


def _print_usage(shown: dict[str, Any]) -> None:
    def limit(value: int | None) -> str:
        return "none" if value is None else str(value)

    print(f"principal:       {shown['principal_id']}")
    for kind in ("bytes", "files"):
        counts = shown[kind]
        print(f"{kind + ':':<16} used {counts['used']}, reserved {counts['reserved']}, limit {limit(counts['limit'])}")
    waiting, kept = shown["awaiting_purge"], shown["held_by_holds"]
    print(
        f"awaiting purge:  {waiting['files']} files, {waiting['bytes']} bytes (held: {kept['files']}, {kept['bytes']})"
    )
    for purpose, counts in shown["purposes"].items():
        print(
            f"  {purpose + ':':<14} bytes used {counts['bytes']['used']}, reserved {counts['bytes']['reserved']}, "
            f"limit {limit(counts['bytes']['limit'])}; files used {counts['files']['used']}, reserved "
            f"{counts['files']['reserved']}, limit {limit(counts['files']['limit'])}"
        )


def cmd_quota(args: argparse.Namespace) -> int:
    """Set or show one principal's quota, or check (and repair) the usage counters; exit 1 when they drifted."""
    from app.content import quotas

    runtime = one_shot_runtime("quota", needs_store=False, commits=False)
    try:
        if args.quota_command == "check":
            drifted = quotas.drift(runtime)
            report: list[dict[str, Any]] = [
                {
                    "principal_id": str(row.principal_id),
                    "purpose": row.purpose,
                    "recorded": {"bytes": row.recorded.bytes, "files": row.recorded.files},
                    "rows": {"bytes": row.counted.bytes, "files": row.counted.files},
                }
                for row in drifted
            ]
            repaired = quotas.recount(runtime) if drifted and args.repair else False
            if args.json:
                print(json.dumps({"drift": report, "repaired": repaired}))
            else:
                for entry in report:
                    print(
                        f"{entry['principal_id']}  {entry['purpose']:<12} recorded {entry['recorded']['files']} files, "
                        f"{entry['recorded']['bytes']} bytes; the rows hold {entry['rows']['files']} files, "
                        f"{entry['rows']['bytes']} bytes"
                    )
                print(
                    "no drift: the usage counters match the rows"
                    if not drifted
                    else "recounted from the rows"
                    if repaired
                    else "drift found: `lethe quota check --repair` recounts"
                )
            return 1 if drifted and not repaired else 0
        if args.quota_command == "set":
            current = quotas.usage(runtime, None, args.principal).document or {}
            shown = quotas.shown(quotas.set_quota(runtime, None, args.principal, _changed(current, args)))
        else:
            shown = quotas.shown(quotas.usage(runtime, None, args.principal))
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(shown, default=str))
    else:
        _print_usage(shown)
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe quota`."""
    from app.domain.states import PURPOSES

    quota = commands.add_parser("quota", help="quotas: what one principal may hold, and what it holds")
    quota_commands = quota.add_subparsers(dest="quota_command", required=True)
    set_ = quota_commands.add_parser("set", help="change a principal's own limits (the others stay as they were)")
    set_.add_argument("principal", type=uuid_arg, help="the principal, a UUID (a token's sub)")
    set_.add_argument("--max-bytes", type=limit_arg("bytes"), default=KEEP, help="10GiB, none or default")
    set_.add_argument("--max-files", type=limit_arg("files"), default=KEEP, help="a number, none or default")
    set_.add_argument("--purpose", choices=PURPOSES, help="limits of the files of this purpose alone")
    show = quota_commands.add_parser("show", help="a principal's usage and limits")
    show.add_argument("principal", type=uuid_arg)
    check = quota_commands.add_parser("check", help="compare the usage counters with the rows; exit 1 on drift")
    check.add_argument("--repair", action="store_true", help="recount every principal's usage from the rows")
    for sub in (set_, show, check):
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        sub.set_defaults(func=cmd_quota)
