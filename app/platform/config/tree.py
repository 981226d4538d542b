"""The typed tree of the configuration (D14): one frozen dataclass per section, each leaf declaring its key
with key() (type, default, description, secret). KEYS is read from this tree: adding a key is one edit."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from marshmallow import ValidationError, validate

from app.domain.holds import DEFAULT_CASE_REF_PATTERN
from app.domain.rates import Rate
from app.domain.retention import Policy, UnmanagedPrefix
from app.domain.webhooks import Endpoint
from app.platform.config.entries import parse_endpoints, parse_policies, parse_prefixes
from app.platform.config.keys import (
    Duration,
    Durations,
    EntryList,
    Flag,
    Key,
    KeyringField,
    LimitNumber,
    LimitSize,
    Number,
    Origins,
    RateField,
    Size,
    Text,
    _conninfo,
    _keys_of,
    _no_value_range,
    _regex,
    _timezone,
    _url_scheme,
    key,
)
from app.platform.keys import KeyringKey


@dataclass(frozen=True)
class FileStorageConfig:
    """Keys `file.storage.*`."""

    driver: str = key(
        Text(validate=validate.OneOf(["fs", "s3"])),
        "fs",
        "Object store driver: fs (local file system) or s3 (any S3 API through the minio client).",
    )


@dataclass(frozen=True)
class FileFsConfig:
    """Keys `file.fs.*`."""

    root: str = key(
        Text(validate=validate.Length(min=1, error="Must not be empty.")),
        "./.lethe/objects",
        "Root directory of the fs driver.",
    )
    min_free_bytes: int = key(
        Size(validate=_no_value_range(0)),
        "256MiB",
        "Free space below which the fs root counts as full: /readyz answers 503 and uploads are refused.",
    )


@dataclass(frozen=True)
class FileS3Config:
    """Keys `file.s3.*`."""

    endpoint: str = key(
        Text(),
        "",
        "S3 endpoint as host:port, without scheme (for example s3.storage.svc:9000 or s3.amazonaws.com); required "
        "with the s3 driver.",
    )
    bucket: str = key(Text(), "lethe", "Bucket that holds every object of Lethe.")
    region: str = key(Text(), "", "Bucket region; empty lets the client ask the server.")
    secure: bool = key(Flag(), True, "Use HTTPS towards the S3 endpoint.")
    access_key: str = key(Text(), "", "S3 access key.", secret=True)
    secret_key: str = key(Text(), "", "S3 secret key.", secret=True)
    timeout: timedelta = key(
        Duration(),
        "15s",
        "Longest silence of the S3 endpoint within one request (connect: at most 3s); a call is tried 3 times.",
    )
    create_bucket: bool = key(
        Flag(), False, "Create the bucket at start when it does not exist (development and tests)."
    )
    download: str = key(
        Text(validate=validate.OneOf(["proxy", "redirect"])),
        "proxy",
        "How a file's bytes reach a reader: proxy (through the api) or redirect (the api checks the file, then "
        "answers 302 to a presigned GET of at most file.s3.presign_ttl; the bytes bypass the api).",
    )
    presign_ttl: timedelta = key(
        Duration(),
        "60s",
        "How long a presigned download URL of file.s3.download redirect works: how long a copy handed out "
        "just before a delete can still be fetched (with redirect, at most privacy.object_delete_delay).",
    )
    public_endpoint: str = key(
        Text(),
        "",
        "The address presigned URLs (downloads and direct uploads) are signed for, as host:port or "
        "https://host:port, when clients reach the store elsewhere than file.s3.endpoint. Empty: that one.",
    )


@dataclass(frozen=True)
class FileStoreConfig:
    """Keys `file.store.*`."""

    primary: str = key(
        Text(validate=validate.Regexp(r"^[a-z0-9][a-z0-9_.-]{0,62}$", error="Must be a store's name.")),
        "default",
        "The store new files go to: default (the one of file.storage.driver, file.s3.* and file.fs.*) or a name "
        "of file.stores. A file stays in its store until lethe stores migrate moves it.",
    )


@dataclass(frozen=True)
class StoreSettings:
    """One store of `file.stores`: its name, its driver, and that driver's settings (the keys of `file.s3.*` or
    `file.fs.*` without their prefix)."""

    name: str
    driver: str
    s3: FileS3Config | None = None
    fs: FileFsConfig | None = None


def parse_stores(raw: Any) -> tuple[StoreSettings, ...]:
    """`file.stores` from JSON text or a mapping: a JSON object from a store's name to its settings.

    Raises:
        EntryErrors: one message per problem, naming the store and the setting; never a value.
    """
    import json

    from app.platform.config.entries import EntryErrors

    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise EntryErrors(["Not valid JSON (write a JSON object from a store's name to its settings)."]) from None
    if not isinstance(raw, dict):
        raise EntryErrors(["Must be a JSON object from a store's name to its settings."])
    errors: list[str] = []
    found: list[StoreSettings] = []
    sections = {"s3": FileS3Config, "fs": FileFsConfig}
    for position, (name, entry) in enumerate(raw.items(), start=1):
        valid_name = isinstance(name, str) and bool(_STORE_NAME.match(name))
        label = f"store {name}" if valid_name else f"store entry {position}"
        if not valid_name:
            errors.append(f"{label}: the name must be 1 to 63 of a-z 0-9 _ . - (beginning with a letter or digit).")
        elif name == "default":
            errors.append(f"{label}: default is the store of file.storage.driver; give the others another name.")
        if not isinstance(entry, dict):
            errors.append(f"{label}: must be an object.")
            continue
        driver = entry.get("driver")
        if driver not in sections:
            errors.append(f"{label}: driver must be s3 or fs.")
            continue
        section = sections[driver]
        keys = {item.name.rsplit(".", 1)[-1]: item for item in _keys_of(section)}
        values: dict[str, Any] = {}
        for setting in sorted(set(entry) - {"driver"} - set(keys)):
            errors.append(
                f"{label}: {setting if _SETTING.match(str(setting)) else 'a setting'} is not a {driver} setting."
            )
        for setting, item in keys.items():
            given = entry.get(setting, item.default)
            try:
                value = item.field.deserialize(given)
                values[setting] = timedelta(seconds=value) if isinstance(item.field, Duration) else value
            except ValidationError as exc:
                messages = exc.messages if isinstance(exc.messages, list) else [str(exc.messages)]
                errors.append(f"{label}: {setting}: {' '.join(str(message) for message in messages)}")
        if driver == "s3" and "endpoint" in values and not values["endpoint"]:
            errors.append(f"{label}: endpoint is required.")
        if driver == "s3" and "bucket" in values and not values["bucket"]:
            errors.append(f"{label}: bucket is required.")
        if len(values) == len(keys) and valid_name:
            settings = section(**values)
            found.append(StoreSettings(name, driver, **{driver: settings}))
    if errors:
        raise EntryErrors(errors)
    return tuple(found)


_STORE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_SETTING = re.compile(r"^[a-z_]{1,40}$")


@dataclass(frozen=True)
class FileConfig:
    """Keys `file.*`. The sections first: a keyed field reads as one with a default to mypy."""

    storage: FileStorageConfig
    fs: FileFsConfig
    s3: FileS3Config
    store: FileStoreConfig
    stores: tuple[StoreSettings, ...] = key(
        EntryList(parse_stores, StoreSettings),
        "{}",
        "Stores besides default, for moving files between stores (lethe stores migrate): a JSON object from a "
        "store's name to its settings, the keys of file.s3.* (with driver s3) or file.fs.* (with driver fs) "
        'without their prefix, for example {"garage": {"driver": "s3", "endpoint": "garage:3900", '
        '"bucket": "lethe", "access_key": "...", "secret_key": "..."}}. See docs/operations.md.',
        secret=True,
    )
    upload_session_ttl: timedelta = key(
        Duration(),
        "24h",
        "How long an upload session stays open; also the age after which a stale .tmp entry is swept.",
    )
    unattached_ttl: timedelta = key(
        Duration(), "24h", "Age after which a complete attachment that was never attached is deleted (D8 b)."
    )
    failed_row_ttl: timedelta = key(
        Duration(),
        "7d",
        "Age after which a failed or blocked attachment row is deleted (D8 c); its objects go at once.",
    )
    gc_interval: timedelta = key(
        Duration(), "15m", "How often the cleanup runs. Must be shorter than privacy.object_delete_delay."
    )
    gc_batch_size: int = key(
        Number(validate=_no_value_range(1, 100_000)), 500, "Candidates read per batch by each cleanup step."
    )
    part_size: int = key(
        Size(validate=_no_value_range(1024, 5 * 1024**3)),
        "8MiB",
        "Size of every upload part but the last (at least 5MiB with s3, the S3 minimum).",
    )
    purge_retry_base: timedelta = key(
        Duration(),
        "1m",
        "Wait before a file whose objects the store refused is purged again; it doubles with each attempt.",
    )
    purge_retry_max: timedelta = key(Duration(), "1h", "Longest wait between two purge attempts of one file.")
    complete_timeout: timedelta = key(
        Duration(),
        "15m",
        "How long a completion's lease on its upload lasts; a complete after that may take the upload over.",
    )
    write_timeout: timedelta = key(
        Duration(),
        "60s",
        "How long a tus PATCH's write lease on its upload lasts without a sign of life (it renews the lease while "
        "its body arrives); a PATCH after that may take the upload over (409 upload_busy before).",
    )
    write_wait: timedelta = key(
        Duration(),
        "5s",
        "How long a tus PATCH waits for another PATCH of the same upload to end its write lease (a client that "
        "paused or lost its connection sends again at once) before it answers 409 upload_busy.",
    )
    link_ttl: timedelta = key(
        Duration(), "10m", "The longest a file link (createFileLink) works; a link asks for this or less."
    )
    link_secret: str = key(
        Text(),
        "",
        "The secret file links are sealed with (at least 32 characters; lethe dev makes one). Empty: "
        "createFileLink answers 501. Changing it ends every link handed out.",
        secret=True,
    )
    direct_url_ttl: timedelta = key(
        Duration(),
        "15m",
        "How long a presigned part URL of a direct upload works (never past its session's expiry; s3 only).",
    )
    direct_abort_delay: timedelta = key(
        Duration(),
        "1m",
        "How long after aborting a direct upload the cleanup aborts it again and lists its key to confirm that "
        "nothing is left (a part PUT in flight during an abort may still land).",
    )
    max_size: int = key(
        Size(validate=_no_value_range(1)), "1GiB", "Largest file accepted by POST /uploads (413 above it)."
    )
    max_attachments: int = key(Number(validate=_no_value_range(1, 1000)), 10, "Most files one message may attach.")
    encryption: bool = key(
        Flag(),
        False,
        "on: every object Lethe writes for a new file (its original, parts, tus tail, variants) is sealed under a "
        "random data key of that file, wrapped by file.keyring and destroyed when the file ends (lethe dev, and the "
        "chart on a new installation, turn it on); off: new files are written as they are. Each file knows which it "
        "is: a store holds both.",
    )
    keyring: tuple[KeyringKey, ...] = key(
        KeyringField(),
        "",
        "The keys that wrap every file's data key, as id:base64 entries separated by commas, the current first "
        "(lethe keys generate ID makes one). Required with file.encryption on; a key a live file needs may not "
        "leave it (the roles exit 2 naming its id). See docs/operations.md, 'Keys'.",
        secret=True,
    )


@dataclass(frozen=True)
class PrivacyConfig:
    """Keys `privacy.*`."""

    object_delete_delay: timedelta = key(
        Duration(), "1d", "Longest time an object of a deleted file may stay in the store; the backlog warns past it."
    )
    receipt_ttl: timedelta = key(
        Duration(), "400d", "How long the name-free receipt of a purged file is kept; the cleanup removes older ones."
    )
    message_tombstone_ttl: timedelta = key(
        Duration(),
        "30d",
        "How long a deleted message's tombstone (author and the application's id) is kept; until then its id "
        "answers 409 message_deleted and a repeated delete 204; the cleanup removes older ones.",
    )


@dataclass(frozen=True)
class DatabaseConfig:
    """Keys `database.*`."""

    url: str = key(
        Text(validate=_conninfo),
        "",
        "PostgreSQL connection string, in any form libpq takes: a URL (postgresql://user:pass@host:5432/db; "
        "several hosts as host-a:5432,host-b:5432 with ?target_session_attrs=read-write), host=... keywords, "
        "a unix socket directory (?host=/var/run/postgresql) or service=. Empty: lethe dev starts an embedded "
        "server.",
        secret=True,
    )
    tx_retry_max: int = key(
        Number(validate=_no_value_range(0, 100)),
        5,
        "Retries of a transaction that met a deadlock or a serialization failure.",
    )
    pool_size: int = key(Number(validate=_no_value_range(1, 1000)), 10, "Connections in each process's pool.")
    pool_timeout: timedelta = key(
        Duration(), "3s", "Longest wait for a pooled connection; past it a request answers 503 service_unavailable."
    )
    connect_timeout: timedelta = key(
        Duration(), "3s", "Longest wait to open a connection to PostgreSQL (at least 2s, libpq's smallest)."
    )
    statement_timeout: timedelta = key(
        Duration(),
        "3s",
        "Longest statement (set on the server); a connection whose server says nothing for this long "
        "plus a second is dropped (a partition).",
    )
    maintenance_statement_timeout: timedelta = key(
        Duration(),
        "60s",
        "Longest statement of maintenance work (cleanup, retention, erasure, sweeps, audit), set for each of "
        "its transactions; requests keep database.statement_timeout.",
    )
    pooler: str = key(
        Text(validate=validate.OneOf(["none", "transaction"])),
        "none",
        "transaction: database.url goes through a transaction pooler (PgBouncer pool_mode=transaction): no "
        "prepared statements and no session settings are sent; set statement_timeout on the database role, "
        "and give the scheduler schedule.database_url.",
    )
    keepalive: timedelta = key(
        Duration(),
        "10s",
        "Silence after which TCP keepalive probes start, on both ends of every connection; a peer that "
        "does not answer 3 probes (one every third of this) is dropped.",
    )


@dataclass(frozen=True)
class BrokerConfig:
    """Keys `broker.*`."""

    url: str = key(
        Text(validate=_url_scheme("amqp", "amqps", several=True)),
        "",
        "RabbitMQ URL (amqp://user:pass@host:5672/vhost), or the URLs of a cluster's nodes separated by ';' (each "
        "tried in turn when the one in use is lost). Empty: lethe dev uses an in-process broker.",
        secret=True,
    )
    queue_type: str = key(
        Text(validate=validate.OneOf(["classic", "quorum"])),
        "classic",
        "Type of every queue Lethe declares: classic, or quorum (replicated, for a RabbitMQ cluster). A queue that "
        "exists with the other type makes the worker exit 2 (docs/operations.md says how to move).",
    )


@dataclass(frozen=True)
class OutboxConfig:
    """Keys `outbox.*`."""

    relay_interval: timedelta = key(Duration(), "5s", "How often the scheduler relays outbox rows left behind.")
    relay_age: timedelta = key(
        Duration(), "10s", "Age after which an outbox row counts as left behind (its committer did not publish it)."
    )
    publish_linger: timedelta = key(
        Duration(),
        "10ms",
        "How long a process's publisher thread gathers committed jobs before it publishes them: under load "
        "many deletes travel as one message and one outbox DELETE (at most this much later).",
    )


@dataclass(frozen=True)
class AuthConfig:
    """Keys `auth.*`."""

    jwt_secret: str = key(Text(), "", "HS256 shared secret for bearer tokens.", secret=True)
    jwt_public_key: str = key(Text(), "", "PEM public key for RS256 or ES256 bearer tokens.")
    issuer: str = key(Text(), "", "Required `iss` of bearer tokens, when set.")
    audience: str = key(Text(), "", "Required `aud` of bearer tokens, when set.")
    leeway: timedelta = key(
        Duration(),
        "30s",
        "Clock skew allowed when checking a token's exp, nbf and iat (between the issuer's clock and Lethe's).",
    )


@dataclass(frozen=True)
class ApiConfig:
    """Keys `api.*`."""

    host: str = key(Text(), "127.0.0.1", "Address the api binds (0.0.0.0 in a container).")
    port: int = key(Number(validate=_no_value_range(1, 65535)), 8080, "Port of the api.")
    workers: int = key(Number(validate=_no_value_range(1, 64)), 2, "gunicorn worker processes of the api.")
    threads: int = key(Number(validate=_no_value_range(1, 256)), 4, "Threads of each gunicorn worker process.")
    timeout: timedelta = key(
        Duration(), "120s", "gunicorn's worker timeout: a request running longer makes its worker restart."
    )
    max_json_depth: int = key(
        Number(validate=_no_value_range(2, 512)),
        32,
        "Deepest nesting of arrays and objects a JSON body may have; deeper bodies answer 400 json_too_deep.",
    )
    cors_origins: tuple[str, ...] = key(
        Origins(),
        "",
        "Web origins allowed to call the API from a browser (CORS), comma-separated, or * for any; empty: no "
        "CORS headers. Needed by browser tus clients such as Uppy.",
    )
    public_url: str = key(
        Text(),
        "",
        "The address clients reach the api at, such as https://files.example.com (file links are made with "
        "it). Empty: the address each request came to.",
    )
    console_session_ttl: timedelta = key(
        Duration(),
        "8h",
        "How long a session of the operator console lasts after its sign-in (lethe console prints the one-time "
        "link); from 1m to 7d.",
    )


@dataclass(frozen=True)
class WorkerConfig:
    """Keys `worker.*`."""

    processes: int = key(Number(validate=_no_value_range(1, 64)), 2, "dramatiq worker processes.")
    threads: int = key(Number(validate=_no_value_range(1, 64)), 4, "Threads of each dramatiq process.")


@dataclass(frozen=True)
class MetricsConfig:
    """Keys `metrics.*`."""

    port: int = key(
        Number(validate=_no_value_range(1, 65535)), 9191, "Port of /metrics on the worker and the scheduler."
    )


@dataclass(frozen=True)
class ScanConfig:
    """Keys `scan.*`."""

    clamd_address: str = key(Text(), "", "clamd as host:port; empty: files are not scanned (scan_status skipped).")
    timeout: timedelta = key(Duration(), "60s", "Time limit of one clamd scan.")
    max_size: int = key(
        Size(validate=_no_value_range(1, 4 * 1024**3)),
        "25MiB",
        "Largest file clamd takes (set it to clamd's StreamMaxLength). With a scanner configured, a larger upload "
        "is refused up front (413 too_large_to_scan).",
    )
    pending_ttl: timedelta = key(
        Duration(),
        "2h",
        "Age after which the cleanup sends a still pending scan again (once); past twice this age the scan ends "
        "as error and the file is purged.",
    )


@dataclass(frozen=True)
class SentryConfig:
    """Keys `sentry.*`."""

    dsn: str = key(Text(), "", "Sentry DSN; empty disables Sentry.", secret=True)


@dataclass(frozen=True)
class LogConfig:
    """Keys `log.*`."""

    format: str = key(
        Text(validate=validate.OneOf(["json", "console"])),
        "json",
        "json (one object a line) or console (readable, for lethe dev).",
    )
    level: str = key(
        Text(validate=validate.OneOf(["DEBUG", "INFO", "WARNING", "ERROR"])), "INFO", "Lowest level logged."
    )


@dataclass(frozen=True)
class ScheduleConfig:
    """Keys `schedule.*`."""

    timezone: str = key(Text(validate=_timezone), "UTC", "Time zone of cron schedules (D16).")
    leader_timeout: timedelta = key(
        Duration(),
        "30s",
        "The scheduler leader's session ends after this much silence (idle_session_timeout); the leader "
        "pings every third of it, and a standby leads at most about this long after the leader is lost.",
    )
    dev_fast: bool = key(
        Flag(),
        False,
        "Development only: run every retention and sweep schedule every 5 minutes, ignoring cadence gates.",
    )
    database_url: str = key(
        Text(validate=_conninfo),
        "",
        "A direct PostgreSQL URL for the scheduler's leader session (a session-level lock, which a transaction "
        "pooler cannot hold); required with database.pooler transaction. Empty: database.url.",
        secret=True,
    )


@dataclass(frozen=True)
class RetentionConfig:
    """Keys `retention.*`."""

    policies: tuple[Policy, ...] = key(
        EntryList(parse_policies, Policy),
        "[]",
        "Retention by purpose: a JSON list of {name, purpose, max_age, grace, schedule, min_interval?, "
        "include_attached?}; see docs/operations.md.",
    )


@dataclass(frozen=True)
class StorageConfig:
    """Keys `storage.*`."""

    unmanaged_prefixes: tuple[UnmanagedPrefix, ...] = key(
        EntryList(parse_prefixes, UnmanagedPrefix),
        "[]",
        "Prefixes other software writes into the store: a JSON list of {prefix, max_age?, schedule}; "
        "see docs/operations.md.",
    )
    sweep_concurrency: int = key(
        Number(validate=_no_value_range(1, 64)),
        4,
        "Batch deletes (of at most 1,000 keys each) in flight at once in a sweep or an audit --delete.",
    )


@dataclass(frozen=True)
class JournalConfig:
    """Keys `journal.*` (the deletion journal outside the database, and the restore guard)."""

    enabled: bool = key(
        Flag(),
        True,
        "Append every end of a file, erasure and legal hold to the deletion journal under journal/ of the object "
        "store, and refuse data requests while the database is behind it (restored from a backup).",
    )
    hash_key: str = key(
        Text(),
        "",
        "The key a person's hash in the journal is made with; empty: a random key the database made at its "
        "creation (a restored database has it too).",
        secret=True,
    )
    retention: timedelta = key(
        Duration(),
        "400d",
        "How long journal segments are kept: longer than the longest database backup is kept "
        "(journal.backup_retention), or a restore of that backup cannot be replayed.",
    )
    backup_retention: timedelta = key(
        Duration(),
        "35d",
        "How long your oldest database backup is kept (for the check that journal.retention is longer).",
    )
    check_interval: timedelta = key(
        Duration(), "5s", "How often each process compares its database with the journal's head."
    )
    write_linger: timedelta = key(
        Duration(),
        "20ms",
        "How long a process's journal writer gathers further commits' entries after the first before it writes a "
        "segment (under load, one segment for many commits; the journal's lag grows by at most this much).",
    )
    write_interval: timedelta = key(
        Duration(),
        "200ms",
        "The shortest time between two segments one process's journal writer starts: under load its commits' "
        "entries gather this long, so each process writes at most a few segments a second (the journal's lag "
        "under load is about this much; a lone deletion waits only journal.write_linger).",
    )
    auto_reconcile: bool = key(
        Flag(),
        True,
        "Replay the journal by itself when the database is found behind it (else: lethe restore reconcile).",
    )


@dataclass(frozen=True)
class ImageConfig:
    """Keys `image.*` (variants of image files)."""

    variants: bool = key(
        Flag(),
        True,
        "Make variants (thumb-small, thumb-large, preview; poster for an animation) of every deliverable JPEG, "
        "PNG, GIF, WebP, HEIC or AVIF file, without any metadata.",
    )
    thumb_small: int = key(
        Number(validate=_no_value_range(16, 4096)), 160, "Longest side of thumb-small, in pixels (never enlarged)."
    )
    thumb_large: int = key(
        Number(validate=_no_value_range(16, 4096)), 480, "Longest side of thumb-large, in pixels (never enlarged)."
    )
    preview: int = key(
        Number(validate=_no_value_range(16, 8192)),
        1600,
        "Longest side of preview and poster, in pixels (never enlarged).",
    )
    max_pixels: int = key(
        Number(validate=_no_value_range(1, 1_000_000_000)),
        90_000_000,
        "Pixel budget: an image of more pixels (every frame of an animation counted), read from its header, "
        "gets no variants (a decompression bomb declares its size).",
    )
    max_size: int = key(
        Size(validate=_no_value_range(1, 1024**3)),
        "50MiB",
        "Largest file variants are made of (it is read whole into the worker's memory).",
    )
    timeout: timedelta = key(
        Duration(), "30s", "Time limit of making one file's variants; past it the file gets none (reason timeout)."
    )
    strip_metadata: str = key(
        Text(validate=validate.OneOf(["location", "all", "none"])),
        "location",
        "What leaves a JPEG, PNG, WebP or GIF original before it is deliverable, without re-encoding it: "
        "'location' (GPS, XMP, IPTC, maker notes, serial numbers, owner, comments, the EXIF thumbnail, "
        "trailers), 'all' (every piece of metadata), 'none' (stored as uploaded); one over image.max_size is "
        "stored as uploaded. The orientation and the colour "
        "profile stay; the file's size and sha256 become those of the stored bytes.",
    )
    strip_original: bool = key(
        Flag(),
        True,
        "Inline display of an image file whose original was stored as uploaded (image.strip_metadata none, "
        "HEIC, AVIF, a file stored before stripping) shows its preview (no metadata, no location) instead; "
        "while no preview is ready it is an attachment. The original stays downloadable as an attachment.",
    )
    pending_ttl: timedelta = key(
        Duration(),
        "1h",
        "Age after which the cleanup sends a variants job that never came back again (once); past twice this "
        "age the file ends without variants (reason lost).",
    )


@dataclass(frozen=True)
class HoldsConfig:
    """Keys `holds.*` (legal holds)."""

    case_ref_pattern: str = key(
        Text(validate=_regex),
        DEFAULT_CASE_REF_PATTERN,
        "The form of a hold's case reference, a regular expression matched whole: an opaque ticket number, never a "
        "name. The default takes CASE-2026-0042 or LIT-17 and refuses Jane.Doe or a file name; whatever the "
        "pattern, a reference is at most 64 ASCII letters, digits, '.', '_' and '-'.",
    )


@dataclass(frozen=True)
class QuotasConfig:
    """Keys `quotas.*` (what one principal may hold; `lethe quota set` and setQuota give one principal its own)."""

    default_bytes: int | None = key(
        LimitSize(validate=_no_value_range(0)),
        "",
        "Most bytes one principal's files may hold (uploads in progress reserve their declared size; a deleted "
        "file counts until its purge); empty: no limit. A principal's own quota overrides it.",
    )
    default_files: int | None = key(
        LimitNumber(validate=_no_value_range(0)),
        "",
        "Most files one principal may hold, counted as default_bytes counts bytes; empty: no limit.",
    )


@dataclass(frozen=True)
class RateLimitsConfig:
    """Keys `rate_limits.*`: requests per window on what costs, per principal (a request without valid
    credentials: per client address), counted in the database and shared by every api process. Upload parts, tus
    PATCH chunks and reads are never limited. Empty: no limit."""

    uploads: Rate | None = key(
        RateField(), "600/1m", "createUpload (native, tus creation, direct) per principal: 429 rate_limited above it."
    )
    completions: Rate | None = key(RateField(), "600/1m", "completeUpload per principal.")
    links: Rate | None = key(RateField(), "1200/1m", "createFileLink per principal (reading a link is never limited).")
    batch_deletes: Rate | None = key(RateField(), "120/1m", "batchDeleteFiles per principal (up to 1,000 ids each).")
    erasures: Rate | None = key(RateField(), "30/1h", "createErasure per principal (a manage token).")


@dataclass(frozen=True)
class WebhooksConfig:
    """Keys `webhooks.*` (Standard Webhooks 1.0)."""

    endpoints: tuple[Endpoint, ...] = key(
        EntryList(parse_endpoints, Endpoint),
        "[]",
        "Receivers of signed, name-free events: a JSON list of {name, url, secret, events}; secret is "
        "whsec_<base64> or a list of them (a rotation); events of file.ready, file.blocked, file.failed, "
        "file.variants_ready, file.purged, erasure.completed, hold.placed, hold.released. See docs/api.md.",
        secret=True,
    )
    retry_schedule: tuple[timedelta, ...] = key(
        Durations(),
        "5s,5m,30m,2h,5h,10h,10h",
        "Delays before each retry of a delivery that timed out, met a connection error or a 5xx; after the last "
        "the delivery failed (lethe webhooks redeliver sends it again).",
    )
    timeout: timedelta = key(
        Duration(),
        "10s",
        "Longest time one delivery attempt takes, end to end: connection, request, status line and headers (the "
        "answer's body is never read); a slower receiver's attempt is cut off and retried on the schedule.",
    )
    concurrency: int = key(
        Number(validate=_no_value_range(1, 64)),
        2,
        "Threads of their own in each worker process for webhook attempts: a slow receiver never takes the threads "
        "of purges and scans (worker.threads), and endpoints are attempted independently of each other.",
    )
    delivery_ttl: timedelta = key(
        Duration(),
        "7d",
        "How long a delivery's row (ids, endpoint, event type, attempts, status; no body) is kept; the cleanup "
        "removes older ones.",
    )


@dataclass(frozen=True)
class Config:
    """The validated configuration, a tree of frozen dataclasses: `cfg.file.unattached_ttl` is a timedelta,
    `cfg.get("file.unattached_ttl")` the same by name. Each leaf declares its key (key()); KEYS is read from
    this tree, so adding a key is one edit. tests/unit/test_config.py checks each key's field parses to the
    leaf's type."""

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
    holds: HoldsConfig
    quotas: QuotasConfig
    rate_limits: RateLimitsConfig
    webhooks: WebhooksConfig
    image: ImageConfig
    journal: JournalConfig

    def get(self, name: str) -> Any:
        node: Any = self
        for part in name.split("."):
            node = getattr(node, part)
        return node


KEYS: tuple[Key, ...] = tuple(_keys_of(Config))
KEYS_BY_NAME = {key.name: key for key in KEYS}
