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
