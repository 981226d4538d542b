"""Prometheus metrics (D15). Names only; no label ever holds a file name, key, digest or id."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

OUTBOX_DEPTH = Gauge("lethe_outbox_depth", "Jobs waiting in the outbox (set by the scheduler's relay).",
                     multiprocess_mode="mostrecent")
OUTBOX_RELAYED = Counter("lethe_outbox_relayed_total", "Outbox jobs published by the relay (left behind by "
                                                       "their committer).")
HTTP_REQUESTS = Counter("lethe_http_requests_total", "HTTP requests by route template, method and status.",
                        ["route", "method", "status"])
HTTP_DURATION = Histogram("lethe_http_request_duration_seconds", "HTTP request duration by route template.",
                          ["route", "method"])
FILES_DELETED = Counter("lethe_files_deleted_total", "Files marked deleted, by what deleted them.", ["via"])
PURGED_FILES = Counter("lethe_purge_files_total", "Files handled by purge, by result: row (objects and row "
                                                  "removed), objects (objects only; the row stays for its "
                                                  "uploader), nothing, kept_attached (an internal error).",
                       ["result"])
PURGE_KEYS = Counter("lethe_purge_keys_total", "Object keys sent to the store for deletion by purge.")
PURGE_ERRORS = Counter("lethe_purge_errors_total", "Purge runs that met a storage error and will retry.")
PURGE_DURATION = Histogram("lethe_purge_duration_seconds", "Duration of one purge run (many files).")
