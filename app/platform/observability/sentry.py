"""Sentry (D15): only when `sentry.dsn` is set, with an allow-list of event members and no message text."""

from __future__ import annotations

from typing import Any

_SENTRY_KEEP = {
    "event_id",
    "timestamp",
    "level",
    "logger",
    "platform",
    "release",
    "environment",
    "server_name",
    "exception",
    "tags",
    "contexts",
    "transaction",
    "modules",
    "sdk",
    "type",
}


def scrub_event(event: dict[str, Any], hint: Any = None) -> dict[str, Any]:
    """Sentry before_send: keep an allow-list of members, drop request bodies, headers, cookies, query
    strings, local variables, breadcrumbs and extras (D15)."""
    clean = {key: value for key, value in event.items() if key in _SENTRY_KEEP}
    request = event.get("request")
    if isinstance(request, dict):
        clean["request"] = {"method": request.get("method"), "url": request.get("url", "").split("?")[0]}
    for exc in (clean.get("exception") or {}).get("values", []) or []:
        exc["value"] = "[message withheld]"  # an exception's text may quote a row, a path or a key
        for frame in (exc.get("stacktrace") or {}).get("frames", []) or []:
            frame.pop("vars", None)
    return clean


def setup_sentry(dsn: str, role: str, transport: Any = None) -> None:
    """Initialise sentry-sdk when a DSN is set: no PII (the default), no request bodies, no local
    variables, no breadcrumbs, no transactions, and scrub_event on every event."""
    if not dsn:
        return
    import sentry_sdk

    options = {}
    if transport is not None:
        options["transport"] = transport  # tests capture what would be sent
    sentry_sdk.init(
        dsn=dsn,
        before_send=scrub_event,  # type: ignore[arg-type]  # a plain dict in, a plain dict out
        before_send_transaction=lambda event, hint: None,
        max_request_body_size="never",
        include_local_variables=False,
        max_breadcrumbs=0,
        **options,
    )
    sentry_sdk.set_tag("role", role)
