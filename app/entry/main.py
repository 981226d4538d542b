"""The `lethe` command: one image, one code base, several roles (D1).

    lethe config check     validate the configuration; exit 2 naming every bad key
    lethe migrate          apply the database migrations
    lethe api              the HTTP API under gunicorn
    lethe worker           the dramatiq workers
    lethe scheduler        the periodic jobs
    lethe dev [--port N]   api + worker + scheduler in one process, on embedded defaults
    lethe token --sub UUID mint a development bearer token (HS256, auth.jwt_secret)
    lethe cleanup [--dry-run]  run one cleanup now (or show what it would do), as counts per step
    lethe retention run [--policy NAME] [--dry-run] [--force]   run retention policies now (D16)
    lethe retention restore FILE_ID                              bring a retired file back
    lethe sweep run [--prefix P] [--dry-run]                     sweep unmanaged prefixes now (D16)
    lethe audit [--json] [--delete --grace 24h]                  what no row explains in the store (D16)
    lethe receipt FILE_ID [--json]                               the receipt of a purged file (D16)
    lethe erase --subject UUID [--wait]                          erase everything of a person (D16)
    lethe hold place --subject UUID|--file UUID --case-ref REF   suspend purges for a legal claim
    lethe hold list | lethe hold release ID                      the holds; release one
    lethe webhooks list [--failed] | lethe webhooks redeliver ID  webhook deliveries
    lethe keys status | rotate [--dry-run] | generate ID         per-file keys and the keyring
    lethe quota set UUID [--max-bytes S] [--max-files N] [--purpose P] | show UUID | check [--repair]
                                                                 quotas, usage and the check of its counters
    lethe explain FILE_ID [--json]                               why a file is still here, and what ends it
    lethe stores list | status | migrate --to NAME [--from NAME] | migrate --stop
                                                                 the stores, and moving every file to another

Every role loads and validates the configuration before it does anything else, and exits 2 on an error.
prometheus_client is imported only after PROMETHEUS_MULTIPROC_DIR is settled (api and worker fork).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, TextIO

from app.domain.access import SCOPES
from app.entry import (
    audit,
    cleanup,
    console,
    erase,
    explain,
    hold,
    keyring,
    quota,
    receipt,
    restore,
    retention,
    stores,
    sweep,
    webhooks,
)
from app.entry.ops import duration_arg, uuid_arg
from app.entry.support import (
    EXIT_CONFIG,
    check_keyring_or_exit,
    check_schema_or_exit,
    inspect_store_or_exit,
    load_config_or_exit,
    print_config_errors,
    setup_role_logging,
    warn_if_autovacuum_off,
)
from app.errors import ConfigError

if TYPE_CHECKING:
    from app.platform.config.tree import Config

log = logging.getLogger("lethe.cli")


def _setup(role: str, cfg: Config, fmt: str | None = None, stream: TextIO | None = None) -> None:
    setup_role_logging(role, cfg, fmt, stream)


def _require_database(cfg: Config) -> None:
    if not cfg.database.url:
        print_config_errors(
            ConfigError({"database.url": ["Required by this role (only lethe dev starts an embedded server)."]})
        )
        sys.exit(EXIT_CONFIG)


def _require_broker(cfg: Config) -> None:
    # Without RabbitMQ the jobs of a production role would be published to an in-process broker that
    # no worker reads: only lethe dev may run without one.
    if not cfg.broker.url:
        print_config_errors(
            ConfigError({"broker.url": ["Required by this role (only lethe dev runs an in-process broker)."]})
        )
        sys.exit(EXIT_CONFIG)


NO_SIGNING_KEY = (
    "Required: set auth.jwt_secret (HS256) or auth.jwt_public_key (RS256/ES256); without either "
    "the api answers 401 to every request (lethe dev makes a secret of its own)."
)


def _signing_key_missing(cfg: Config) -> ConfigError | None:
    """D11: the api verifies bearer tokens with one of the two keys; neither set is a bad configuration."""
    if cfg.auth.jwt_secret or cfg.auth.jwt_public_key:
        return None
    return ConfigError({"auth.jwt_secret": [NO_SIGNING_KEY]})  # the message names the other key: said once


def _as_the_running_dev(cfg: Config) -> Config | None:
    """Beside a running `make run` (lethe dev) with no database.url of its own, the configuration checked is that
    instance's, as every operator command finds it. None: this folder had a lethe dev, and none runs now."""
    from app.entry.dev import as_the_running_dev

    if cfg.database.url:
        return cfg
    attached = as_the_running_dev(cfg)
    if attached is not None:
        print("checking the configuration of the lethe dev running from this folder (./.lethe/dev.json)")
        return attached
    return None if os.path.isdir(".lethe") else cfg


def cmd_config_check(args: argparse.Namespace) -> int:
    from app.entry.support import OBJECT_LOCK_MESSAGE
    from app.platform import config, tracing

    try:
        cfg = config.load()
    except ConfigError as exc:
        print_config_errors(exc, sys.stdout)
        return EXIT_CONFIG
    if tracing.config_errors():
        print_config_errors(ConfigError(tracing.config_errors()), sys.stdout)
        return EXIT_CONFIG
    running = _as_the_running_dev(cfg)
    if running is None:
        print(
            "lethe config check: no `make run` (lethe dev) runs from this folder now, so there is nothing to check "
            "here: start it (make run) and check again beside it, or set LETHE_DATABASE_URL and the rest of a "
            "role's configuration to check that."
        )
        return EXIT_CONFIG
    cfg = running
    missing = _signing_key_missing(cfg)
    if missing is not None:
        print_config_errors(missing, sys.stdout)
        return EXIT_CONFIG
    if cfg.database.url:
        from app.entry.support import AUTOVACUUM_OFF, autovacuum_off, keyring_problem, schema_problem

        wrong_schema = schema_problem(cfg.database.url)
        if wrong_schema is not None:
            print(f"database.url (LETHE_DATABASE_URL): {wrong_schema}")
            return EXIT_CONFIG
        lacking = keyring_problem(cfg)
        if lacking is not None:
            print_config_errors(lacking, sys.stdout)
            return EXIT_CONFIG

        off = autovacuum_off(cfg.database.url)
        if off:
            print("warning: " + AUTOVACUUM_OFF.format(where=", ".join(off)))
    if cfg.schedule.dev_fast:
        print(
            "warning: schedule.dev_fast is on: every retention and sweep schedule runs every 5 minutes and "
            "cadence gates are ignored (development only)"
        )
    if cfg.file.storage.driver == "s3":
        from app.entry.wiring import build_store
        from app.errors import StorageError

        try:
            facts = build_store(cfg).describe()
        except StorageError as exc:
            print(f"OK (the bucket could not be inspected: {exc})")
            return 0
        print(f"bucket: versioning {facts['versioning']}, object lock {facts['object_lock']}")
        if facts["object_lock"] == "enabled" and not cfg.file.encryption:
            print_config_errors(ConfigError({"file.s3.bucket": [OBJECT_LOCK_MESSAGE]}), sys.stdout)
            return EXIT_CONFIG
    print("OK")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    cfg = load_config_or_exit("migrate")
    _require_database(cfg)
    _setup("migrate", cfg)
    import psycopg

    from app.db.migrate import SchemaTooNew, migrate, too_new
    from app.entry.support import connect_failure

    if args.down_to:
        return _roll_back(cfg, args.down_to, args.dry_run)
    try:
        applied = migrate(cfg.database.url)
    except psycopg.OperationalError as exc:
        print(f"lethe migrate: database.url (LETHE_DATABASE_URL): {connect_failure(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    except SchemaTooNew as exc:
        print(f"lethe migrate: database.url (LETHE_DATABASE_URL): {too_new(exc.unknown)}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"applied {applied} migration(s)")
    return 0


def _roll_back(cfg: Config, target: str, dry_run: bool) -> int:
    """`lethe migrate --down-to ID`: this release's down-migrations of what came after ID (exit 2, one sentence,
    when one refuses or ID is not this release's)."""
    import psycopg

    from app.db.migrate import SchemaTooNew, known_migrations, roll_back_to, too_new
    from app.entry.support import connect_failure

    try:
        undone = roll_back_to(cfg.database.url, target, dry_run=dry_run)
    except ValueError:
        print(
            f"lethe migrate: --down-to: this release ships no migration {target}; its migrations are "
            f"{', '.join(sorted(known_migrations()))}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    except SchemaTooNew as exc:
        print(f"lethe migrate: database.url (LETHE_DATABASE_URL): {too_new(exc.unknown)}", file=sys.stderr)
        return EXIT_CONFIG
    except psycopg.OperationalError as exc:
        print(f"lethe migrate: database.url (LETHE_DATABASE_URL): {connect_failure(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    except psycopg.Error as exc:
        diag = getattr(exc, "diag", None)
        said = " ".join(
            part for part in (getattr(diag, "message_primary", None), getattr(diag, "message_hint", None)) if part
        )
        print(
            f"lethe migrate: a down-migration refused: {said or type(exc).__name__}. The ones after it were rolled "
            "back; nothing else changed.",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    verb = "would roll back" if dry_run else "rolled back"
    print(f"{verb} {len(undone)} migration(s){': ' + ', '.join(undone) if undone else ''}")
    return 0


def _start_role(role: str) -> Config:
    """What every production role does before it runs: load the configuration (exit 2 naming bad keys), require
    a database and a broker (and the api a signing key), make the metrics directory, set up logs and Sentry,
    inspect the store (exit 2 on object lock without file.encryption), check that the keyring holds every key
    live files need (exit 2 naming the key ids) and warn when autovacuum is off. Returns the configuration."""
    cfg = load_config_or_exit(role)
    _require_database(cfg)
    _require_broker(cfg)
    missing = _signing_key_missing(cfg) if role == "api" else None
    if role == "scheduler" and cfg.database.pooler == "transaction" and not cfg.schedule.database_url:
        # The leader lock is a session-level advisory lock: a transaction pooler cannot keep it.
        missing = ConfigError(
            {
                "schedule.database_url": [
                    "Required when database.pooler is transaction: the scheduler's leader session needs a direct "
                    "connection to PostgreSQL (a transaction pooler cannot hold a session-level lock)."
                ]
            }
        )
    if missing is not None:
        print_config_errors(missing)
        sys.exit(EXIT_CONFIG)
    from app.platform.observability.registry import prepare_multiprocess_dir

    prepare_multiprocess_dir()
    _setup(role, cfg)
    check_schema_or_exit(cfg.database.url)  # a database a newer release migrated (a rollback) is refused here
    inspect_store_or_exit(cfg, role)
    check_keyring_or_exit(cfg)
    warn_if_autovacuum_off(cfg, role)
    return cfg


def cmd_api(args: argparse.Namespace) -> int:
    cfg = _start_role("api")
    from app.entry.serve import ApiServer

    ApiServer(cfg, args.port).run()
    return 0


def _queues_of_the_configured_type_or_exit(cfg: Config) -> None:
    """A worker declares Lethe's queues with broker.queue_type; one that exists with the other type is refused
    by RabbitMQ on every declare. Exit 2 naming the key and the queues, not a loop of errors. An
    unreachable RabbitMQ is an outage, not a configuration error: the worker starts and retries."""
    import pika.exceptions

    from app.platform.jobs.broker import LetheRabbitmqBroker, build_broker

    broker = build_broker(cfg.broker.url, cfg.broker.queue_type)
    try:
        mismatched = broker.mismatched_queues() if isinstance(broker, LetheRabbitmqBroker) else []
    except (pika.exceptions.AMQPError, OSError):
        return
    finally:
        broker.close()
    if mismatched:
        print_config_errors(
            ConfigError(
                {
                    "broker.queue_type": [
                        f"These queues exist with another type than {cfg.broker.queue_type}: {', '.join(mismatched)}. "
                        "RabbitMQ cannot change a queue's type; see docs/operations.md, 'Moving to quorum queues'."
                    ]
                }
            )
        )
        sys.exit(EXIT_CONFIG)


def cmd_worker(args: argparse.Namespace) -> int:
    cfg = _start_role("worker")
    _queues_of_the_configured_type_or_exit(cfg)
    from dramatiq import cli as dramatiq_cli
    from prometheus_client import start_http_server

    from app.platform.observability.registry import metrics_registry

    # The parent serves the metrics of every forked worker process (D15).
    start_http_server(cfg.metrics.port, addr=cfg.api.host, registry=metrics_registry())
    from app.platform.jobs.broker import QUEUES
    from workers.pools import POOL_ENV, split_queues

    # Webhook deliveries run on threads of their own (webhooks.concurrency): the main threads never take them.
    queues, pool = split_queues(args.queues or QUEUES)
    os.environ[POOL_ENV] = "1" if pool else "0"
    argv = [
        "workers.entry",
        "--processes",
        str(args.processes or cfg.worker.processes),
        "--threads",
        str(args.threads or cfg.worker.threads),
        "--skip-logging",
        "--queues",
        *sorted(queues),
    ]
    parsed = dramatiq_cli.make_argument_parser().parse_args(argv)  # type: ignore[no-untyped-call]
    return int(dramatiq_cli.main(parsed) or 0)  # type: ignore[no-untyped-call]


def cmd_scheduler(args: argparse.Namespace) -> int:
    cfg = _start_role("scheduler")
    from scheduler.main import run

    return run(cfg)


def cmd_dev(args: argparse.Namespace) -> int:
    # Configuration first: a bad key exits 2 before anything starts.
    load_config_or_exit("dev")
    from app.entry.dev import run_dev

    return run_dev(port=args.port, state_dir=args.state_dir)


def cmd_token(args: argparse.Namespace) -> int:
    """Mint an HS256 token with auth.jwt_secret (development; production tokens come from your IdP)."""
    from pathlib import Path

    from app.entry.token import mint_token

    cfg = load_config_or_exit("token")
    secret = cfg.auth.jwt_secret
    made = Path(args.state_dir) / "jwt_secret"  # the one lethe dev made
    if not secret and made.exists():
        secret = made.read_text().strip()
    if not secret:
        print_config_errors(
            ConfigError(
                {
                    "auth.jwt_secret": [
                        f"Required to mint a token. No secret of lethe dev was found in {made.parent.resolve()}: run this "
                        "from the folder where `make run` ran, or pass --state-dir PATH/TO/.lethe"
                    ]
                }
            )
        )
        return EXIT_CONFIG
    print(mint_token(secret, args.sub, tuple(args.scope), args.ttl, issuer=cfg.auth.issuer, audience=cfg.auth.audience))
    return 0


# The operator commands, a module each with its own parser (its add_parser), in the order `lethe --help` lists them.
COMMAND_GROUPS = (
    cleanup,
    retention,
    sweep,
    audit,
    erase,
    hold,
    quota,
    stores,
    webhooks,
    restore,
    keyring,
    receipt,
    explain,
    console,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lethe", description="Lethe: a file lifecycle service.")
    commands = parser.add_subparsers(dest="command", required=True)

    config = commands.add_parser("config", help="configuration")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    config_commands.add_parser("check", help="validate; exit 2 naming every bad key").set_defaults(
        func=cmd_config_check
    )

    migrate = commands.add_parser("migrate", help="apply database migrations (or roll some back: --down-to)")
    migrate.add_argument(
        "--down-to",
        metavar="MIGRATION",
        help="run this release's down-migrations of every "
        "migration after MIGRATION (the older release's last), before a rollback to it; see "
        "docs/operations.md, 'Rolling back a release'",
    )
    migrate.add_argument("--dry-run", action="store_true", help="with --down-to: name them, run none")
    migrate.set_defaults(func=cmd_migrate)

    api = commands.add_parser("api", help="the HTTP API (gunicorn)")
    api.add_argument("--port", type=int, help="overrides api.port")
    api.set_defaults(func=cmd_api)

    worker = commands.add_parser("worker", help="the dramatiq workers")
    worker.add_argument("--processes", type=int)
    worker.add_argument("--threads", type=int)
    worker.add_argument("--queues", nargs="*")
    worker.set_defaults(func=cmd_worker)

    commands.add_parser("scheduler", help="the periodic jobs").set_defaults(func=cmd_scheduler)

    for group in COMMAND_GROUPS:
        group.add_parser(commands)

    token = commands.add_parser("token", help="mint an HS256 bearer token for development")
    token.add_argument("--sub", required=True, type=uuid_arg, help="the principal, a UUID")
    token.add_argument(
        "--scope",
        nargs="+",
        default=["files:read", "files:write"],
        choices=SCOPES,
        help="files:read files:write manage",
    )
    token.add_argument("--ttl", default="1h", type=duration_arg, help="lifetime, such as 1h or 7d")
    token.add_argument("--state-dir", default=".lethe", help="where lethe dev keeps its secret")
    token.set_defaults(func=cmd_token)

    dev = commands.add_parser("dev", help="api + worker + scheduler in one process on embedded defaults")
    dev.add_argument("--port", type=int, help="overrides api.port")
    dev.add_argument("--state-dir", default=".lethe", help="where the embedded services keep their data")
    dev.set_defaults(func=cmd_dev)
    return parser


# The roles that serve /metrics: each settles PROMETHEUS_MULTIPROC_DIR itself (prepare_multiprocess_dir).
SERVING_ROLES = ("api", "worker", "scheduler", "dev")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if args.command not in SERVING_ROLES and metrics_dir and not os.path.isdir(metrics_dir):
        # An operator's command beside a role whose metrics directory is not there (another container's, or not
        # made yet): its counters stay in its own process, instead of a traceback at the first import
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
