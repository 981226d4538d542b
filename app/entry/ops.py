"""What the operator commands of `lethe` share (D16): one-shot work on the database and the store, run by hand,
each in a module of its own under app/entry/ with its parser (cleanup.py, retention.py, sweep.py, audit.py,
erase.py, hold.py, webhooks.py, restore.py, keyring.py, receipt.py). Each prints its report on stdout as a readable
table (or one JSON object with --json), its logs on stderr, and a progress bar on a terminal. Without database.url
they use the `lethe dev` running from the same folder (./.lethe/dev.json), or exit 2 saying what to run."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from app.entry.support import (
    EXIT_CONFIG,
    check_database_or_exit,
    inspect_store_or_exit,
    load_config_or_exit,
    setup_role_logging,
)

if TYPE_CHECKING:
    from app.platform.config.tree import Config
    from app.runtime import Runtime


NO_DATABASE = (
    "lethe: bad configuration:\n  database.url (LETHE_DATABASE_URL): Required by this command.\n"
    "  Either run it from the folder where `make run` (lethe dev) is running, so it finds that "
    "server through ./.lethe/, or start one there first:  make run\n"
    "  or point it at your database:  LETHE_DATABASE_URL=postgresql://user@host:5432/db lethe ..."
)


def _attach_to_dev(cfg: Config) -> tuple[Config, bool]:
    """Without database.url, an operator command uses the `lethe dev` running from this folder (its database, fs
    root, keyring and secret: app/entry/dev.py as_the_running_dev); else it exits 2 saying what to run. Returns
    the configuration and whether it attached."""
    if cfg.database.url:
        return cfg, False
    from app.entry.dev import as_the_running_dev

    attached = as_the_running_dev(cfg)
    if attached is None:
        print(NO_DATABASE, file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    return attached, True


def progress_bar(desc: str, unit: str, as_json: bool, total: int | None = None) -> Any:
    """A progress bar on stderr when it is a terminal and the output is for people (tqdm), else None."""
    if as_json or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=f" {unit}", file=sys.stderr, leave=False)


def one_shot_runtime(name: str, needs_store: bool = True, commits: bool = True) -> Runtime:
    """The runtime of an operator command: configuration, database, logs on stderr (console on a terminal),
    the report on stdout. `commits`: whether the command may commit jobs (a read-only one says nothing of the
    broker)."""
    cfg, attached = _attach_to_dev(load_config_or_exit(name))
    check_database_or_exit(cfg.database.url)  # refused, unknown, authentication, not migrated: say so, exit 2
    setup_role_logging(name, cfg, fmt="console" if sys.stderr.isatty() else None, stream=sys.stderr)
    if needs_store:
        inspect_store_or_exit(cfg, name)
    from app.entry.wiring import build_runtime
    from app.platform.jobs.broker import build_broker

    runtime = build_runtime(cfg, build_broker(cfg.broker.url, cfg.broker.queue_type), role=name)
    if not cfg.broker.url:
        # Without RabbitMQ nobody consumes what this process would publish (an in-process broker dies with
        # it): the jobs stay in the outbox, committed, and a relay sends them (D9, D19).
        runtime.db.after_commit = None
        if commits:
            print(
                DEV_RELAYS.format(
                    seconds=int(cfg.outbox.relay_interval.total_seconds() + cfg.outbox.relay_age.total_seconds())
                )
                if attached
                else NO_BROKER,
                file=sys.stderr,
            )
    return runtime


T = TypeVar("T")

DEV_RELAYS = (
    "lethe: the jobs this command commits go through the running lethe dev (its relay sends them within "
    "about {seconds} s)."
)
NO_BROKER = (
    "lethe: broker.url (LETHE_BROKER_URL) is not set: the jobs this command commits (purges, scans, "
    "erasure rounds) stay in the outbox until a relay sends them: the scheduler (lethe scheduler) or a "
    "running lethe dev. Set broker.url to send them at once."
)


def uuid_arg(text: str) -> uuid.UUID:
    """argparse type: a UUID; the error names the argument, never echoes the value."""

    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a UUID") from None


def chosen(items: Iterable[T], wanted: str | None, attribute: str, what: str) -> list[T]:
    if wanted is None:
        return list(items)
    chosen = [item for item in items if getattr(item, attribute) == wanted]
    if not chosen:
        print(f"lethe: no {what} of that name is configured", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    return chosen


def printable(row: Any, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """A row as JSON-ready fields: times as ISO 8601, ids as text, and no null (as the API answers, D6)."""
    return {
        name: (
            value.isoformat() if hasattr(value, "isoformat") else str(value) if isinstance(value, uuid.UUID) else value
        )
        for name, value in dataclasses.asdict(row).items()
        if value is not None and name not in leave_out
    }


def duration_arg(text: str) -> timedelta:
    """argparse type: a duration such as 90s, 1h or 7d."""
    from app.platform.config import parse_duration

    try:
        return timedelta(seconds=parse_duration(text))
    except ValueError:
        raise argparse.ArgumentTypeError("must be a duration such as 1h or 7d") from None
