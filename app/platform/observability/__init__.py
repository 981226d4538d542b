"""Observability (D15): logs.py (log_event and the scrubbing rules), log_setup.py (formatters and role set-up),
sentry.py, metrics.py (what Lethe counts) and registry.py (what /metrics exposes). Nothing here may carry a
file name, object key, digest or token."""
