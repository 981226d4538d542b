"""Prometheus metrics (D15). Names only; no label ever holds a file name, key, digest or id (a policy name and
an unmanaged prefix are the operator's configuration, not user data)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

OUTBOX_DEPTH = Gauge(
    "lethe_outbox_depth", "Jobs waiting in the outbox (set by the scheduler's relay).", multiprocess_mode="mostrecent"
)
OUTBOX_RELAYED = Counter(
    "lethe_outbox_relayed_total", "Outbox jobs published by the relay (left behind by their committer)."
)
HTTP_REQUESTS = Counter(
    "lethe_http_requests_total", "HTTP requests by route template, method and status.", ["route", "method", "status"]
)
HTTP_DURATION = Histogram(
    "lethe_http_request_duration_seconds", "HTTP request duration by route template.", ["route", "method"]
)
STORE_THROTTLED = Counter(
    "lethe_store_throttled_total",
    "Store calls the object store answered with a throttling answer (S3 SlowDown, 503, 429), by operation; the "
    "driver backs off and retries deletes and listings.",
    ["operation"],
)
RATE_LIMITED = Counter(
    "lethe_rate_limited_total",
    "Requests answered 429 rate_limited, by policy (rate_limits.*: uploads, completions, links, batch_deletes, "
    "erasures).",
    ["policy"],
)
UPLOADS_CREATED = Counter(
    "lethe_uploads_created_total",
    "Upload sessions created, by transfer: api (the bytes pass "
    "through the api), direct (straight to S3 through presigned URLs) or tus.",
    ["transfer"],
)
WEBHOOK_DELIVERIES = Counter(
    "lethe_webhook_deliveries_total",
    "Webhook deliveries that ended an attempt, by endpoint "
    "and outcome: delivered, retry (a timeout, a connection error or a 5xx; tried again), "
    "failed (a 4xx, or the schedule spent), disabled (a 410, or the endpoint is disabled).",
    ["endpoint", "outcome"],
)
WEBHOOK_ATTEMPTS = Counter(
    "lethe_webhook_attempts_total", "HTTP attempts of webhook deliveries, by endpoint.", ["endpoint"]
)
RESTORE_PENDING = Gauge(
    "lethe_restore_pending",
    "1 while the database is behind its deletion journal (restored "
    "from a backup): data requests answer 503 restore_pending until it is reconciled.",
    multiprocess_mode="max",
)
JOURNAL_PENDING = Gauge(
    "lethe_journal_pending",
    "Journal entries committed and not yet written to the journal.",
    multiprocess_mode="mostrecent",
)
JOURNAL_ENTRIES = Counter("lethe_journal_entries_total", "Entries written to the deletion journal.")
JOURNAL_OLDEST_PENDING = Gauge(
    "lethe_journal_oldest_pending_seconds",
    "Age of the oldest entry committed and not yet "
    "in the deletion journal (0: none waits); a database lost now loses at most this "
    "much of its deletions' record. Set by the scheduler that leads.",
    multiprocess_mode="mostrecent",
)
JOURNAL_LAG = Histogram(
    "lethe_journal_lag_seconds",
    "From an entry's commit to its segment written in the deletion journal (the recovery point of the restore guard).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
JOURNAL_SPOOLED = Counter(
    "lethe_journal_spooled_total",
    "Entries written unnumbered to the journal's spool because the database could not be reached to number them.",
)
VARIANTS = Counter(
    "lethe_variants_total",
    "Image files whose variants job ended, by outcome: ready, or the "
    "reason it got none (too_large, too_many_pixels, undecodable, timeout, lost).",
    ["outcome"],
)
CONTENT_CORRUPT = Counter(
    "lethe_content_corrupt_total",
    "Reads of a sealed file whose stored bytes did not open as "
    "what was sealed (altered, cut short, or not the file's): nothing of them was served.",
)
KEYS_DESTROYED = Counter(
    "lethe_file_keys_destroyed_total",
    "Data keys of files destroyed at the end of their file (the point of no return of its removal).",
)
KEYS_REWRAPPED = Counter(
    "lethe_file_keys_rewrapped_total", "Data keys wrapped again by the current keyring key (lethe keys rotate)."
)
FILES_DELETED = Counter("lethe_files_deleted_total", "Files marked deleted, by what deleted them.", ["via"])
PURGED_FILES = Counter(
    "lethe_purge_files_total",
    "Files handled by purge, by result: row (objects and row "
    "removed), objects (objects only; the row stays for its "
    "uploader), nothing, refused (the store refused its objects; "
    "retried later), held (a legal hold keeps it), "
    "kept_attached, kept_slot, kept_live (an internal error).",
    ["result"],
)
HOLD_FILES_LOST = Counter(
    "lethe_hold_files_lost_total",
    "Files whose objects went while a legal hold covered them: the hold was placed after their removal had begun.",
)
CONSOLE_CSP_VIOLATIONS = Counter(
    "lethe_console_csp_violations_total",
    "Content-Security-Policy violations browsers reported of console pages, by directive (should stay 0).",
    ["directive"],
)
STORE_FILES_MOVED = Counter(
    "lethe_store_files_moved_total", "Files a migration between stores moved (copied, verified, their row moved)."
)
STORE_BYTES_MOVED = Counter("lethe_store_bytes_moved_total", "Bytes of the files a migration between stores moved.")
STORE_COPIES_REMOVED = Counter(
    "lethe_store_copies_removed_total",
    "Copies of files removed from a store that no longer holds them (a migration's source, after the delay).",
)
PURGE_KEYS = Counter("lethe_purge_keys_total", "Object keys sent to the store for deletion by purge.")
PURGE_ERRORS = Counter("lethe_purge_errors_total", "Purge runs that met a storage error and will retry.")
PURGE_REFUSED_FILES = Counter(
    "lethe_purge_refused_files_total",
    "Purge attempts of a file whose objects the store refused (the file is retried "
    "with backoff; the others of its batch went on).",
)
DELETE_TO_GONE = Histogram(
    "lethe_delete_to_gone_seconds",
    "From a file's deletion mark to the removal of its row (its objects went first).",
    buckets=(0.1, 0.5, 1, 2, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400),
)
PURGE_DURATION = Histogram("lethe_purge_duration_seconds", "Duration of one purge run (many files).")
DB_UNIT_SECONDS = Histogram(
    "lethe_db_unit_seconds",
    "Duration of one unit of work (its transaction, retries included) by its name (delete_file, cleanup.b, ...).",
    ["name"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CLEANUP_FILES = Counter(
    "lethe_cleanup_files_total", "Cleanup candidates by step and outcome (acted, kept, failed).", ["step", "outcome"]
)
CLEANUP_STEP_DURATION = Histogram("lethe_cleanup_step_duration_seconds", "Duration of one cleanup step.", ["step"])
CLEANUP_RUNS = Counter("lethe_cleanup_runs_total", "Cleanup runs by outcome (ok, failed, busy).", ["outcome"])

RETENTION_FILES = Counter(
    "lethe_retention_files_total", "Files retired and deleted by each retention policy.", ["policy", "action"]
)
RETENTION_SKIPPED = Counter(
    "lethe_retention_skipped_runs_total", "Retention runs skipped by their cadence gate (min_interval).", ["policy"]
)
RETENTION_LAST_RUN = Gauge(
    "lethe_retention_last_run_timestamp_seconds",
    "When each retention policy last really ran (Unix time).",
    ["policy"],
    multiprocess_mode="mostrecent",
)
SWEEP_OBJECTS = Counter(
    "lethe_sweep_objects_total",
    "Objects of unmanaged prefixes by sweep outcome (deleted, "
    "failed, newer: written after the run's bound, invalid: a "
    "key Lethe cannot address).",
    ["prefix", "outcome"],
)
SWEEP_LAST_RUN = Gauge(
    "lethe_sweep_last_run_timestamp_seconds",
    "When each unmanaged prefix was last swept (Unix time).",
    ["prefix"],
    multiprocess_mode="mostrecent",
)

_lazy: dict[str, Gauge] = {}


def _lazy_gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
    """A gauge created at its first use, so that it is absent from /metrics until a cleanup run set it (D8 f).
    With several dramatiq processes the most recent value wins (multiprocess mode)."""
    if name not in _lazy:
        _lazy[name] = Gauge(name, documentation, list(labels), multiprocess_mode="mostrecent")
    return _lazy[name]


def lazy_gauges() -> None:
    """Create every lazy gauge (what the dashboard and alert tests check names against)."""
    purge_backlog_gauges()
    purge_failing_gauge()
    scan_pending_gauges()
    dead_tuples_gauge()


def purge_backlog_gauges() -> tuple[Gauge, Gauge]:
    """The backlog gauges: deleted rows not yet purged, and the age of the oldest mark."""
    return (
        _lazy_gauge("lethe_file_purge_backlog", "Deleted files rows not yet purged (set by each cleanup run)."),
        _lazy_gauge(
            "lethe_file_purge_backlog_oldest_seconds", "Age of the oldest deletion mark not yet purged (0 when none)."
        ),
    )


def hold_gauges() -> tuple[Gauge, Gauge]:
    """Legal holds in force and the deleted files they hold back (set by each cleanup run). Held files
    are not in the backlog gauges: the backlog alert does not fire for them."""
    return (
        _lazy_gauge("lethe_holds_active", "Legal holds placed and not released (set by each cleanup run)."),
        _lazy_gauge(
            "lethe_files_held",
            "Deleted files whose purge a legal hold defers (set by each cleanup "
            "run; not counted in lethe_file_purge_backlog).",
        ),
    )


def webhook_backlog_gauge() -> Gauge:
    """The age of the oldest undelivered webhook message (set by each cleanup run; 0 when none)."""
    return _lazy_gauge(
        "lethe_webhook_oldest_undelivered_seconds",
        "Age of the oldest webhook message not delivered yet (set by each cleanup run; 0 when none).",
    )


def purge_failing_gauge() -> Gauge:
    """Files the store keeps refusing (set by each cleanup run)."""
    return _lazy_gauge(
        "lethe_file_purge_failing", "Files whose objects the store keeps refusing (set by each cleanup run)."
    )


def scan_pending_gauges() -> tuple[Gauge, Gauge]:
    """Complete files whose scan is pending, and the age of the oldest (step k). A scan pending past twice
    scan.pending_ttl is ended by the cleanup (D19)."""
    return (
        _lazy_gauge("lethe_scan_pending", "Complete files whose scan is still pending."),
        _lazy_gauge(
            "lethe_scan_pending_oldest_seconds", "Age of the oldest pending scan of a complete file (0 when none)."
        ),
    )


def dead_tuples_gauge() -> Gauge:
    """Dead tuples of files, events and messages (step k): a deleted row's bytes stay in the table's file until
    VACUUM reclaims them (docs/deletion.md). The label is a table name, never data."""
    return _lazy_gauge(
        "lethe_table_dead_tuples",
        "Dead tuples of a table: deleted rows whose bytes stay in the table's file until VACUUM.",
        ("table",),
    )
