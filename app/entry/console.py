"""`lethe console`: print a one-time sign-in link to the operator console (/console on the api)."""

from __future__ import annotations

import argparse
import json
import uuid

from app.entry.ops import duration_arg, one_shot_runtime, uuid_arg


def base_url(public_url: str, host: str, port: int) -> str:
    """Where an operator's browser reaches the api: api.public_url, else the api's own address (a wildcard bind
    is reached through the loopback address)."""
    if public_url:
        return public_url.rstrip("/")
    reached = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://[{reached}]:{port}" if ":" in reached else f"http://{reached}:{port}"


def cmd_console(args: argparse.Namespace) -> int:
    """Record a sign-in link for a principal with `manage`, and print it (it works once, for --ttl)."""
    from app.lifecycle.console import LINK_TTL_MAX, make_link

    if not args.ttl.total_seconds() > 0 or args.ttl > LINK_TTL_MAX:
        print("lethe console: --ttl must be more than 0s and at most 1h")
        return 2
    runtime = one_shot_runtime("console", needs_store=False, commits=False)
    principal = args.principal or uuid.uuid4()
    try:
        token = make_link(runtime, principal, args.ttl)
        api = runtime.cfg.api
        base = args.url.rstrip("/") if args.url else base_url(api.public_url, api.host, api.port)
    finally:
        runtime.close()
    link = f"{base}/console/sign-in/{token}"
    minutes = max(int(args.ttl.total_seconds() // 60), 1)
    if args.json:
        print(json.dumps({"link": link, "principal": str(principal), "expires_in_s": int(args.ttl.total_seconds())}))
    else:
        print(f"Open this link within {minutes} min; it works once (principal {principal}, scope manage):")
        print(link)
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe console`."""
    console = commands.add_parser("console", help="print a one-time sign-in link to the operator console")
    console.add_argument(
        "--principal", type=uuid_arg, help="the principal the session acts as (a UUID; default: a new one)"
    )
    console.add_argument("--ttl", default="10m", type=duration_arg, help="how long the link works, at most 1h")
    console.add_argument("--url", help="the api's address as the browser reaches it (default: api.public_url)")
    console.add_argument("--json", action="store_true", help="print one JSON object")
    console.set_defaults(func=cmd_console)
