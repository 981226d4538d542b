"""`lethe keys`: the keyring against the database (status), wrapping every live data key again by the current key
(rotate), and a new key for the keyring (generate). Never prints a key but the one `generate` makes."""

from __future__ import annotations

import argparse
import json
import sys

from app.entry.support import EXIT_CONFIG, print_config_errors
from app.errors import ConfigError, KeyUnavailable


def cmd_keys(args: argparse.Namespace) -> int:
    if args.keys_command == "generate":
        from app.platform.keys import generate_entry

        print(generate_entry(args.key_id))
        return 0
    from app.entry.ops import one_shot_runtime, progress_bar
    from app.lifecycle import keys

    runtime = one_shot_runtime("keys", needs_store=False, commits=False)
    try:
        if args.keys_command == "status":
            shown = keys.status(runtime).as_dict()
        else:
            bar = progress_bar("rotate", "key", args.json)
            try:
                report = keys.rotate(
                    runtime,
                    batch_size=args.batch_size,
                    dry_run=args.dry_run,
                    on_batch=bar.update if bar is not None else None,
                )
            finally:
                if bar is not None:
                    bar.close()
            shown = report.as_dict()
    except KeyUnavailable:
        print_config_errors(ConfigError({"file.keyring": ["Empty: there is no current key to wrap by."]}))
        return EXIT_CONFIG
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(shown))
    else:
        for name, value in shown.items():
            print(f"{name}: {value}")
    missing = shown.get("missing_key_ids")
    if isinstance(missing, list) and missing:
        print(
            f"lethe keys: live files need key ids the keyring does not hold: {', '.join(missing)} (file.keyring)",
            file=sys.stderr,
        )
        return 1
    return 1 if args.keys_command == "rotate" and (shown.get("left_by_key_id") or shown.get("unusable")) else 0


def key_id_arg(text: str) -> str:
    """argparse type: a key id (1 to 64 letters, digits, '.', '_' or '-')."""
    from app.platform.keys import KEY_ID

    if not KEY_ID.fullmatch(text):
        raise argparse.ArgumentTypeError("must be 1 to 64 letters, digits, '.', '_' or '-'")
    return text


def batch_arg(text: str) -> int:
    """argparse type: a batch size from 1 to 10000."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number from 1 to 10000") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError("must be a whole number from 1 to 10000")
    return value


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe keys ...` on the command's parser."""
    keys = commands.add_parser("keys", help="per-file keys: the keyring against the database")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    status = keys_commands.add_parser("status", help="files per key id, and key ids the keyring lacks")
    rotate = keys_commands.add_parser(
        "rotate", help="wrap every live data key again by the current key (resumable: run it again)"
    )
    rotate.add_argument("--batch-size", type=batch_arg, default=1000, help="files per transaction (1000)")
    rotate.add_argument("--dry-run", action="store_true", help="count what would be wrapped again; change nothing")
    for sub in (status, rotate):
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        sub.set_defaults(func=cmd_keys)
    generate = keys_commands.add_parser("generate", help="print a new keyring entry ID:KEY (32 random bytes)")
    generate.add_argument("key_id", type=key_id_arg, help="the new key's id, such as 2027-01")
    generate.set_defaults(func=cmd_keys)
