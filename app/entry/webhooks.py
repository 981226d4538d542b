"""`lethe webhooks list | redeliver`: webhook deliveries."""

from __future__ import annotations

import argparse
import json
import sys
import uuid

from app.entry.ops import one_shot_runtime, printable, uuid_arg


def limit_arg(text: str) -> int:
    """argparse type: a count from 1 to 10000."""
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError("must be a number from 1 to 10000")
    return int(text)


def delivery_arg(text: str) -> uuid.UUID:
    """argparse type: a delivery id, as a UUID or as its webhook-id (msg_<hex>)."""
    return uuid_arg(text[4:] if text.startswith("msg_") else text)


def cmd_webhooks(args: argparse.Namespace) -> int:
    """Webhook deliveries: the latest (or the failed ones) as a table or JSON; send one again."""
    from app.lifecycle import webhooks

    redeliver = args.webhooks_command == "redeliver"
    runtime = one_shot_runtime("webhooks", needs_store=False, commits=False)
    outcome = None
    try:
        if redeliver:
            delivery_id = args.delivery_id
            row = webhooks.redeliver(runtime, delivery_id)
            if row is None:
                print("no such delivery (unknown, or older than webhooks.delivery_ttl)", file=sys.stderr)
                return 1
            if not runtime.cfg.broker.url and row.endpoint in {e.name for e in runtime.cfg.webhooks.endpoints}:
                # No worker takes the job at once: this command attempts it itself (the delivery's lease keeps
                # any other attempt out meanwhile), within webhooks.timeout.
                report = webhooks.deliver(runtime, [delivery_id])
                outcome = next(iter(report.outcomes), None)
                row = webhooks.delivery(runtime, delivery_id) or row
            rows = [row]
        else:
            rows = webhooks.list_deliveries(runtime, failed_only=args.failed, limit=args.limit)
    finally:
        runtime.close()
    shown = [printable(row, leave_out=("data",)) for row in rows]  # ids, endpoint, type, attempts: never the data
    if args.json:
        print(json.dumps(shown[0] if args.webhooks_command == "redeliver" else {"deliveries": shown}))
        return 0
    if redeliver:
        if outcome is None:
            print(f"delivery {shown[0]['id']}: pending again; a worker sends it at once with the same webhook-id")
        else:
            print(
                f"delivery {shown[0]['id']}: sent again with the same webhook-id: {outcome} (state {shown[0]['state']})"
            )
        return 0
    print(f"{'id':<36}  {'endpoint':<16}  {'event_type':<17}  {'state':<9}  attempts  last")
    for row in rows:
        last = row.last_status if row.last_status is not None else (row.last_error or "")
        print(f"{row.id!s:<36}  {row.endpoint:<16}  {row.event_type:<17}  {row.state:<9}  {row.attempts:<8}  {last}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe webhooks`."""
    hooks = commands.add_parser("webhooks", help="webhook deliveries")
    hooks_commands = hooks.add_subparsers(dest="webhooks_command", required=True)
    hooks_list = hooks_commands.add_parser("list", help="the latest deliveries, newest first")
    hooks_list.add_argument("--failed", action="store_true", help="only those that failed or were disabled")
    hooks_list.add_argument("--limit", type=limit_arg, default=100, metavar="N", help="at most N (1 to 10000; 100)")
    redeliver = hooks_commands.add_parser("redeliver", help="send a delivery again, with the same webhook-id")
    redeliver.add_argument("delivery_id", type=delivery_arg, help="its id, or its webhook-id (msg_...)")
    for sub in (hooks_list, redeliver):
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        sub.set_defaults(func=cmd_webhooks)
