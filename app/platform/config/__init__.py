"""Configuration (D14): named keys with a type, a default, a description and an environment variable.

Sources, later wins: the defaults below, the optional TOML file named by `LETHE_CONFIG`, then the
environment (`file.unattached_ttl` -> `LETHE_FILE_UNATTACHED_TTL`). Values are validated with marshmallow.

Every error message names the key and never the value: a misplaced secret (a password pasted into the
wrong variable) must not end up in a terminal, a CI log or a pod's events.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
import zoneinfo
import dataclasses
import typing
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from marshmallow import Schema, ValidationError, fields, validate

from app.domain.durations import format_duration as format_duration  # re-exported for the keys
from app.domain.durations import parse_duration as parse_duration
from app.domain.retention import Policy, UnmanagedPrefix
from app.platform.config.entries import EntryErrors, parse_policies, parse_prefixes
from app.errors import ConfigError

ENV_PREFIX = "LETHE_"
S3_MIN_PART_SIZE = 5 * 1024**2
CONFIG_FILE_ENV = "LETHE_CONFIG"

_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|TiB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def parse_size(text: str | int) -> int:
    """Parse a byte size: `1048576`, `8MiB`, `1GiB`."""
    if isinstance(text, bool):
        raise ValueError("not a size")
    if isinstance(text, int):
        return text
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError("not a size")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


class Duration(fields.Field):
    """A duration, written as `90s`, `15m`, `24h`, `7d`; parsed to seconds for the cross-checks, and a
    timedelta in the Config."""

    default_error_messages = {"invalid": "Not a duration (write it as 90s, 15m, 24h or 7d)."}

    def _deserialize(self, value, attr, data, **kwargs):
        try:
            return parse_duration(value)
        except (ValueError, TypeError):
            raise self.make_error("invalid") from None


class Size(fields.Field):
    """A size in bytes, written as a number or with a unit (`8MiB`)."""

    default_error_messages = {"invalid": "Not a size (write it as bytes or as 8MiB, 1GiB)."}

    def _deserialize(self, value, attr, data, **kwargs):
        try:
            return parse_size(value)
        except (ValueError, TypeError):
            raise self.make_error("invalid") from None


class EntryList(fields.Field):
    """A list of objects as JSON text (or a list, from the TOML file), parsed by a function of the domain
    that names each bad entry and field, never a value."""

    def __init__(self, parse, item_type: type, **kwargs):
        super().__init__(**kwargs)
        self.parse, self.item_type = parse, item_type

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, tuple) and all(isinstance(item, self.item_type) for item in value):
            return value  # already parsed (Config.replace)
        try:
            return self.parse(value)
        except EntryErrors as exc:
            raise ValidationError(exc.messages) from None


class Flag(fields.Boolean):
    default_error_messages = {"invalid": "Not a boolean (true or false)."}


class Text(fields.String):
    default_error_messages = {"invalid": "Not a string."}


class Number(fields.Integer):
    default_error_messages = {"invalid": "Not a whole number."}


def _timezone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError("Not a known time zone name (for example UTC or Europe/Berlin).") from None


def _url_scheme(*schemes: str):
    def check(value: str) -> None:
        if value and not value.startswith(tuple(f"{scheme}://" for scheme in schemes)):
            raise ValidationError(f"Must be empty or a URL starting with {' or '.join(s + '://' for s in schemes)}.")

    return check


def _no_value_range(min_value: int, max_value: int | None = None) -> validate.Range:
    # marshmallow's default Range message quotes the bounds, never the input; keep it that way explicitly.
    if max_value is None:
        return validate.Range(min=min_value, error=f"Must be at least {min_value}.")
    return validate.Range(min=min_value, max=max_value, error=f"Must be between {min_value} and {max_value}.")


@dataclass(frozen=True)
class Key:
    """One configuration key.

    Attributes:
        name: dotted name, `file.unattached_ttl`.
        field: the marshmallow field that parses and validates it.
        default: the value before parsing (as an operator would write it).
        description: one line for docs/configuration.md.
        secret: never printed; goes to the chart's Secret rather than its ConfigMap.
    """

    name: str
    field: fields.Field
    default: Any
    description: str
    secret: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.replace(".", "_").upper()

    @property
    def type_name(self) -> str:
        return {
            Duration: "duration",
            Size: "size",
            Flag: "boolean",
            Number: "integer",
            EntryList: "JSON list",
        }.get(type(self.field), "string")


KEYS: tuple[Key, ...] = (
    # file lifecycle
    Key("file.upload_session_ttl", Duration(), "24h",
        "How long an upload session stays open; also the age after which a stale .tmp entry is swept."),
    Key("file.unattached_ttl", Duration(), "24h",
        "Age after which a complete attachment that was never attached is deleted (D8 b)."),
    Key("file.failed_row_ttl", Duration(), "7d",
        "Age after which a failed or blocked attachment row is deleted (D8 c); its objects go at once."),
    Key("file.gc_interval", Duration(), "15m",
        "How often the cleanup runs. Must be shorter than privacy.object_delete_delay."),
    Key("file.gc_batch_size", Number(validate=_no_value_range(1, 100_000)), 500,
        "Candidates read per batch by each cleanup step."),
    Key("file.part_size", Size(validate=_no_value_range(1024, 5 * 1024**3)), "8MiB",
        "Size of every upload part but the last (at least 5MiB with s3, the S3 minimum)."),
    Key("file.purge_retry_base", Duration(), "1m",
        "Wait before a file whose objects the store refused is purged again; it doubles with each attempt."),
    Key("file.purge_retry_max", Duration(), "1h", "Longest wait between two purge attempts of one file."),
    Key("file.complete_timeout", Duration(), "15m",
        "How long a completion holds its upload; a complete after that may take the upload over."),
    Key("file.max_size", Size(validate=_no_value_range(1)), "1GiB",
        "Largest file accepted by POST /uploads (413 above it)."),
    Key("file.max_attachments", Number(validate=_no_value_range(1, 1000)), 10,
        "Most files one message may attach."),
    Key("file.storage.driver", Text(validate=validate.OneOf(["fs", "s3"])), "fs",
        "Object store driver: fs (local file system) or s3 (any S3 API through the minio client)."),
    Key("file.fs.root", Text(validate=validate.Length(min=1, error="Must not be empty.")), "./.lethe/objects",
        "Root directory of the fs driver."),
    Key("file.fs.min_free_bytes", Size(validate=_no_value_range(0)), "256MiB",
        "Free space below which the fs root counts as full: /readyz answers 503 and uploads are refused."),
    Key("file.s3.endpoint", Text(), "",
        "S3 endpoint as host:port, without scheme (for example minio:9000 or s3.amazonaws.com)."),
    Key("file.s3.bucket", Text(), "lethe", "Bucket that holds every object of Lethe."),
    Key("file.s3.region", Text(), "", "Bucket region; empty lets the client ask the server."),
    Key("file.s3.secure", Flag(), True, "Use HTTPS towards the S3 endpoint."),
    Key("file.s3.access_key", Text(), "", "S3 access key.", secret=True),
    Key("file.s3.secret_key", Text(), "", "S3 secret key.", secret=True),
    Key("file.s3.timeout", Duration(), "15s",
        "Longest silence of the S3 endpoint within one request (connect: at most 3s); a call is tried 3 times."),
    Key("file.s3.create_bucket", Flag(), False,
        "Create the bucket at start when it does not exist (development and tests)."),
    # privacy
    Key("privacy.object_delete_delay", Duration(), "1d",
        "Longest time an object of a deleted file may stay in the store; the backlog warns past it."),
    Key("privacy.receipt_ttl", Duration(), "400d",
        "How long the name-free receipt of a purged file is kept; the cleanup removes older ones."),
    Key("privacy.message_tombstone_ttl", Duration(), "30d",
        "How long a deleted message's tombstone (author and the application's id) is kept; until then its id "
        "answers 409 message_deleted and a repeated delete 204; the cleanup removes older ones."),
    # database
    Key("database.url", Text(validate=_url_scheme("postgresql", "postgres")), "",
        "PostgreSQL URL (postgresql://user:pass@host:5432/db). Empty: lethe dev starts an embedded server.",
        secret=True),
    Key("database.tx_retry_max", Number(validate=_no_value_range(0, 100)), 5,
        "Retries of a transaction that met a deadlock or a serialization failure."),
    Key("database.pool_size", Number(validate=_no_value_range(1, 1000)), 10,
        "Connections in each process's pool."),
    Key("database.pool_timeout", Duration(), "3s",
        "Longest wait for a pooled connection; past it a request answers 503 service_unavailable."),
    Key("database.connect_timeout", Duration(), "3s",
        "Longest wait to open a connection to PostgreSQL (at least 2s, libpq's smallest)."),
    Key("database.statement_timeout", Duration(), "3s",
        "Longest statement (set on the server); a connection whose server says nothing for this long "
        "plus a second is dropped (a partition)."),
    Key("database.keepalive", Duration(), "10s",
        "Silence after which TCP keepalive probes start, on both ends of every connection; a peer that "
        "does not answer 3 probes (one every third of this) is dropped."),
    # broker
    Key("broker.url", Text(validate=_url_scheme("amqp", "amqps")), "",
        "RabbitMQ URL (amqp://user:pass@host:5672/vhost). Empty: lethe dev uses an in-process broker.",
        secret=True),
    # outbox
    Key("outbox.relay_interval", Duration(), "5s", "How often the scheduler relays outbox rows left behind."),
    Key("outbox.relay_age", Duration(), "10s",
        "Age after which an outbox row counts as left behind (its committer did not publish it)."),
    # auth
    Key("auth.jwt_secret", Text(), "", "HS256 shared secret for bearer tokens.", secret=True),
    Key("auth.jwt_public_key", Text(), "", "PEM public key for RS256 or ES256 bearer tokens."),
    Key("auth.issuer", Text(), "", "Required `iss` of bearer tokens, when set."),
    Key("auth.audience", Text(), "", "Required `aud` of bearer tokens, when set."),
    Key("auth.leeway", Duration(), "30s",
        "Clock skew allowed when checking a token's exp, nbf and iat (between the issuer's clock and Lethe's)."),
    # api
    Key("api.host", Text(), "127.0.0.1", "Address the api binds (0.0.0.0 in a container)."),
    Key("api.port", Number(validate=_no_value_range(1, 65535)), 8080, "Port of the api."),
    Key("api.workers", Number(validate=_no_value_range(1, 64)), 2, "gunicorn worker processes of the api."),
    Key("api.threads", Number(validate=_no_value_range(1, 256)), 4, "Threads of each gunicorn worker process."),
    Key("api.timeout", Duration(), "120s",
        "gunicorn's worker timeout: a request running longer makes its worker restart."),
    Key("api.max_json_depth", Number(validate=_no_value_range(2, 512)), 32,
        "Deepest nesting of arrays and objects a JSON body may have; deeper bodies answer 400 json_too_deep."),
    # worker
    Key("worker.processes", Number(validate=_no_value_range(1, 64)), 2, "dramatiq worker processes."),
    Key("worker.threads", Number(validate=_no_value_range(1, 64)), 4, "Threads of each dramatiq process."),
    Key("metrics.port", Number(validate=_no_value_range(1, 65535)), 9191,
        "Port of /metrics on the worker and the scheduler."),
    # scan
    Key("scan.clamd_address", Text(), "",
        "clamd as host:port; empty: files are not scanned (scan_status skipped)."),
    Key("scan.timeout", Duration(), "60s", "Time limit of one clamd scan."),
    Key("scan.max_size", Size(validate=_no_value_range(1, 4 * 1024**3)), "25MiB",
        "Largest file clamd takes (set it to clamd's StreamMaxLength). With a scanner configured, a larger upload "
        "is refused up front (413 too_large_to_scan)."),
    Key("scan.pending_ttl", Duration(), "2h",
        "Age after which the cleanup sends a still pending scan again (once); past twice this age the scan ends "
        "as error and the file is purged."),
    # observability
    Key("sentry.dsn", Text(), "", "Sentry DSN; empty disables Sentry.", secret=True),
    Key("log.format", Text(validate=validate.OneOf(["json", "console"])), "json",
        "json (one object a line) or console (readable, for lethe dev)."),
    Key("log.level", Text(validate=validate.OneOf(["DEBUG", "INFO", "WARNING", "ERROR"])), "INFO",
        "Lowest level logged."),
    # retention and unmanaged prefixes (D16)
    Key("retention.policies", EntryList(parse_policies, Policy), "[]",
        "Retention by purpose: a JSON list of {name, purpose, max_age, grace, schedule, min_interval?, "
        "include_attached?}; see docs/operations.md."),
    Key("storage.unmanaged_prefixes", EntryList(parse_prefixes, UnmanagedPrefix), "[]",
        "Prefixes other software writes into the store: a JSON list of {prefix, max_age?, schedule}; "
        "see docs/operations.md."),
    Key("storage.sweep_concurrency", Number(validate=_no_value_range(1, 64)), 4,
        "Batch deletes (of at most 1,000 keys each) in flight at once in a sweep or an audit --delete."),
    # schedules
    Key("schedule.timezone", Text(validate=_timezone), "UTC", "Time zone of cron schedules (D16)."),
    Key("schedule.dev_fast", Flag(), False,
        "Development only: run every retention and sweep schedule every 5 minutes, ignoring cadence gates."),
    Key("schedule.leader_timeout", Duration(), "30s",
        "The scheduler leader's session ends after this much silence (idle_session_timeout); the leader "
        "pings every third of it, and a standby leads at most about this long after the leader is lost."),
)

KEYS_BY_NAME = {key.name: key for key in KEYS}


def _attribute(name: str) -> str:
    return name.replace(".", "__")


def _schema() -> Schema:
    # marshmallow reads dots in an attribute name as nesting; load by the dotted name (data_key) into a
    # flat attribute, so that errors are reported by the key's own name.
    declared = {}
    for key in KEYS:
        field = copy.copy(key.field)
        field.data_key = key.name
        declared[_attribute(key.name)] = field
    return Schema.from_dict(declared)()


@dataclass(frozen=True)
class FileStorageConfig:
    """Keys `file.storage.*`."""

    driver: str


@dataclass(frozen=True)
class FileFsConfig:
    """Keys `file.fs.*`."""

    root: str
    min_free_bytes: int


@dataclass(frozen=True)
class FileS3Config:
    """Keys `file.s3.*`."""

    endpoint: str
    bucket: str
    region: str
    secure: bool
    access_key: str
    secret_key: str
    timeout: timedelta
    create_bucket: bool


@dataclass(frozen=True)
class FileConfig:
    """Keys `file.*`."""

    upload_session_ttl: timedelta
    unattached_ttl: timedelta
    failed_row_ttl: timedelta
    gc_interval: timedelta
    gc_batch_size: int
    part_size: int
    purge_retry_base: timedelta
    purge_retry_max: timedelta
    complete_timeout: timedelta
    max_size: int
    max_attachments: int
    storage: FileStorageConfig
    fs: FileFsConfig
    s3: FileS3Config


@dataclass(frozen=True)
class PrivacyConfig:
    """Keys `privacy.*`."""

    object_delete_delay: timedelta
    receipt_ttl: timedelta
    message_tombstone_ttl: timedelta


@dataclass(frozen=True)
class DatabaseConfig:
    """Keys `database.*`."""

    url: str
    tx_retry_max: int
    pool_size: int
    pool_timeout: timedelta
    connect_timeout: timedelta
    statement_timeout: timedelta
    keepalive: timedelta


@dataclass(frozen=True)
class BrokerConfig:
    """Keys `broker.*`."""

    url: str


@dataclass(frozen=True)
class OutboxConfig:
    """Keys `outbox.*`."""

    relay_interval: timedelta
    relay_age: timedelta


@dataclass(frozen=True)
class AuthConfig:
    """Keys `auth.*`."""

    jwt_secret: str
    jwt_public_key: str
    issuer: str
    audience: str
    leeway: timedelta


@dataclass(frozen=True)
class ApiConfig:
    """Keys `api.*`."""

    host: str
    port: int
    workers: int
    threads: int
    timeout: timedelta
    max_json_depth: int


@dataclass(frozen=True)
class WorkerConfig:
    """Keys `worker.*`."""

    processes: int
    threads: int


@dataclass(frozen=True)
class MetricsConfig:
    """Keys `metrics.*`."""

    port: int


@dataclass(frozen=True)
class ScanConfig:
    """Keys `scan.*`."""

    clamd_address: str
    timeout: timedelta
    max_size: int
    pending_ttl: timedelta


@dataclass(frozen=True)
class SentryConfig:
    """Keys `sentry.*`."""

    dsn: str


@dataclass(frozen=True)
class LogConfig:
    """Keys `log.*`."""

    format: str
    level: str


@dataclass(frozen=True)
class ScheduleConfig:
    """Keys `schedule.*`."""

    timezone: str
    leader_timeout: timedelta
    dev_fast: bool


@dataclass(frozen=True)
class RetentionConfig:
    """Keys `retention.*`."""

    policies: tuple[Policy, ...]


@dataclass(frozen=True)
class StorageConfig:
    """Keys `storage.*`."""

    unmanaged_prefixes: tuple[UnmanagedPrefix, ...]
    sweep_concurrency: int


@dataclass(frozen=True)
class Config:
    """The validated configuration, a tree of frozen dataclasses: `cfg.file.unattached_ttl` is a timedelta,
    `cfg.get("file.unattached_ttl")` the same by name. tests/unit/test_config.py checks that the tree names
    exactly the keys of KEYS, with the type each key's field parses to."""

    file: FileConfig
    privacy: PrivacyConfig
    database: DatabaseConfig
    broker: BrokerConfig
    outbox: OutboxConfig
    auth: AuthConfig
    api: ApiConfig
    worker: WorkerConfig
    metrics: MetricsConfig
    scan: ScanConfig
    sentry: SentryConfig
    log: LogConfig
    schedule: ScheduleConfig
    retention: RetentionConfig
    storage: StorageConfig

    def get(self, name: str) -> Any:
        node: Any = self
        for part in name.split("."):
            node = getattr(node, part)
        return node

    def replace(self, **changes: Any) -> "Config":
        """A copy with some keys changed (`replace(**{"file.gc_batch_size": 2})`), re-validated."""
        raw = {key.name: self.get(key.name) for key in KEYS}
        raw.update(changes)
        return build(raw)


def _nest(flat: Mapping[str, Any], cls: type = Config, prefix: str = "") -> Any:
    """Build the dataclass tree from validated values by dotted name; durations become timedeltas."""
    values = {}
    for field_info in dataclasses.fields(cls):
        name = prefix + field_info.name
        hint = typing.get_type_hints(cls)[field_info.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[field_info.name] = _nest(flat, hint, name + ".")
        elif hint is timedelta:
            values[field_info.name] = timedelta(seconds=flat[name])
        else:
            values[field_info.name] = flat[name]
    return cls(**values)


def _flatten_file(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in data.items():
        dotted = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten_file(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _cross_checks(values: Mapping[str, Any]) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}

    def add(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    def have(*names: str) -> bool:
        return all(name in values for name in names)

    # D14: the catch-up (D8 d) must run inside the delay it guarantees.
    if have("file.gc_interval", "privacy.object_delete_delay") and \
            values["file.gc_interval"] >= values["privacy.object_delete_delay"]:
        message = "file.gc_interval must be shorter than privacy.object_delete_delay."
        add("file.gc_interval", message)
        add("privacy.object_delete_delay", message)
    if values.get("file.storage.driver") == "s3":
        for name in ("file.s3.endpoint", "file.s3.bucket"):
            if not values.get(name):
                add(name, "Required when file.storage.driver is s3.")
        if have("file.part_size") and values["file.part_size"] < S3_MIN_PART_SIZE:
            add("file.part_size", "Must be at least 5MiB with the s3 driver (the S3 minimum part size).")
    if have("file.purge_retry_base", "file.purge_retry_max") and \
            not 1 <= values["file.purge_retry_base"] <= values["file.purge_retry_max"]:
        add("file.purge_retry_base", "Must be at least 1s and at most file.purge_retry_max.")
    if have("outbox.relay_age") and values["outbox.relay_age"] < 1:
        add("outbox.relay_age", "Must be at least 1s.")
    if have("auth.leeway") and values["auth.leeway"] > 300:
        add("auth.leeway", "Must be at most 5m (a longer leeway keeps expired tokens valid).")
    for name, least in (("file.s3.timeout", 1), ("database.pool_timeout", 0.1), ("database.connect_timeout", 2),
                        ("database.statement_timeout", 0.1), ("database.keepalive", 1),
                        ("schedule.leader_timeout", 3)):
        if have(name) and values[name] < least:
            add(name, f"Must be at least {format_duration(least)}.")
    return errors


def build(raw: Mapping[str, Any]) -> Config:
    """Validate raw values (strings or native) by key name and return the Config.

    Raises:
        ConfigError: with one message per bad key; messages never contain a value.
    """
    unknown = sorted(set(raw) - set(KEYS_BY_NAME))
    values = {key.name: raw.get(key.name, key.default) for key in KEYS}
    errors: dict[str, list[str]] = {}
    try:
        loaded = _schema().load(values)
    except ValidationError as exc:
        errors = {name: list(messages) for name, messages in exc.normalized_messages().items()}
        loaded = exc.valid_data or {}
    loaded = {name.replace("__", "."): value for name, value in loaded.items()}
    # Cross-checks run on the keys that parsed, so one run reports every problem at once.
    for name, messages in _cross_checks(loaded).items():
        errors.setdefault(name, []).extend(messages)
    for name in unknown:
        errors.setdefault(name, []).append("Unknown configuration key.")
    if errors:
        raise ConfigError(errors)
    return _nest(loaded)


def load(environ: Mapping[str, str] | None = None) -> Config:
    """Load the configuration from defaults, the `LETHE_CONFIG` file and the environment.

    Raises:
        ConfigError: every bad key, by name.
    """
    environ = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    path = environ.get(CONFIG_FILE_ENV)
    if path:
        try:
            with open(path, "rb") as handle:
                raw.update(_flatten_file(tomllib.load(handle)))
        except OSError:
            raise ConfigError({CONFIG_FILE_ENV: ["The configuration file cannot be read."]}) from None
        except tomllib.TOMLDecodeError:
            raise ConfigError({CONFIG_FILE_ENV: ["The configuration file is not valid TOML."]}) from None
    for key in KEYS:
        if key.env in environ:
            raw[key.name] = environ[key.env]
    return build(raw)


def describe_default(key: Key) -> str:
    """The default as an operator writes it, for docs and the chart."""
    if isinstance(key.default, bool):
        return "true" if key.default else "false"
    return str(key.default)
