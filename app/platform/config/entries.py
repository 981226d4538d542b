"""The list-valued configuration keys `retention.policies` and `storage.unmanaged_prefixes` (D16): parsed into
the values of app/domain/retention.py, every error naming the entry and the field, never a value; and the cron
expressions of their schedules (APScheduler's parser)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from app.domain.durations import parse_duration
from app.domain.keys import KeySchemaError, validate_key
from app.domain.retention import PURPOSES, RESERVED_PREFIXES, Policy, UnmanagedPrefix
from app.domain.webhooks import EVENTS, Endpoint, decode_secret

if TYPE_CHECKING:  # APScheduler is imported when a schedule is read: most configurations have none
    from apscheduler.triggers.cron import CronTrigger

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


def cron_trigger(expression: str, timezone: Any) -> CronTrigger:
    """A 5-field cron expression (minute hour day month weekday) in a time zone.

    Raises:
        ValueError: not a valid 5-field expression (the message never repeats it).
    """
    from apscheduler.triggers.cron import CronTrigger

    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise ValueError("Not a 5-field cron expression (minute hour day month weekday).")
    try:
        return CronTrigger.from_crontab(expression, timezone=timezone)
    except (ValueError, TypeError, KeyError):
        raise ValueError("Not a valid cron expression.") from None


# -- parsing: every error names the entry (by its name when it has a valid one, else its position) and the
# field, never a value ------------------------------------------------------------------------------------


class EntryErrors(ValueError):
    """Problems of a list-valued key, one message each."""

    def __init__(self, messages: list[str]):
        super().__init__("; ".join(messages))
        self.messages = messages


def _ordinal(index: int) -> str:
    return f"entry {index + 1}"


def _read_entries(raw: Any, what: str) -> list[Any]:
    """The entries of a list setting as written: each one checked by its reader (an entry may be anything)."""
    import json

    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else []
        except ValueError:
            raise EntryErrors(["Not valid JSON (write a JSON list of objects)."]) from None
    if not isinstance(raw, (list, tuple)):
        raise EntryErrors([f"Must be a JSON list of {what} objects."])
    return list(raw)


def _field(
    entry: Mapping[str, Any],
    name: str,
    label: str,
    errors: list[str],
    parse: Callable[[Any], Any],
    required: bool = True,
    default: Any = None,
) -> Any:
    if name not in entry or entry[name] is None:
        if required:
            errors.append(f"{label}: {name} is required.")
        return default
    try:
        return parse(entry[name])
    except (ValueError, TypeError) as exc:
        errors.append(f"{label}: {name}: {exc}")
        return default


def _duration(value: Any) -> timedelta:
    try:
        return timedelta(seconds=parse_duration(value))
    except (ValueError, TypeError):
        raise ValueError("Not a duration (write it as 90s, 15m, 24h or 7d).") from None


def _cron(value: Any) -> str:
    cron_trigger(value, "UTC")
    return str(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("Not a boolean (true or false).")
    return value


def _one_of(choices: Sequence[str]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"Must be one of {', '.join(choices)}.")
        return str(value)

    return parse


def _named(entry: Mapping[str, Any], index: int, kind: str, names: set[str], errors: list[str]) -> tuple[str, str]:
    """The entry's name ("" when it has no valid one) and its label in messages: `<kind> <name>`, or
    `<kind> entry <n>` without a valid name. A missing, invalid or repeated name is an error of the entry
    (the caller counts the entry's errors from before this call)."""
    raw_name = entry.get("name")
    valid_name = isinstance(raw_name, str) and bool(_NAME.match(raw_name))
    name = str(raw_name) if valid_name else ""
    label = f"{kind} {name}" if valid_name else f"{kind} {_ordinal(index)}"
    if not valid_name:
        errors.append(f"{label}: name is required: lowercase letters, digits, '_', '.', '-' (at most 63).")
    elif name in names:
        errors.append(f"{label}: name is used by another {kind}.")
    return name, label


def _unknown(entry: Mapping[str, Any], allowed: set[str], label: str, errors: list[str]) -> None:
    # Field names come from the operator's own file: printing them is printing the key, not a value. Long
    # or odd names are not printed.
    for name in sorted(set(entry) - allowed):
        shown = name if isinstance(name, str) and _NAME.match(name) else "(a field)"
        errors.append(f"{label}: unknown field {shown}.")


def parse_policies(raw: Any) -> tuple[Policy, ...]:
    """`retention.policies` from JSON text or a list.

    Raises:
        EntryErrors: one message per problem, naming the policy and the field.
    """
    entries = _read_entries(raw, "policy")
    errors: list[str] = []
    policies: list[Policy] = []
    names: set[str] = set()
    purposes: set[str] = set()
    allowed = {"name", "purpose", "max_age", "grace", "schedule", "min_interval", "include_attached"}
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            errors.append(f"policy {_ordinal(index)}: must be an object.")
            continue
        before = len(errors)
        name, label = _named(entry, index, "policy", names, errors)
        valid_name = bool(name)
        _unknown(entry, allowed, label, errors)
        purpose = _field(entry, "purpose", label, errors, _one_of(PURPOSES))
        if purpose is not None and purpose in purposes:
            errors.append(f"{label}: purpose has another policy already (one policy per purpose).")
        max_age = _field(entry, "max_age", label, errors, _duration)
        grace = _field(entry, "grace", label, errors, _duration)
        schedule = _field(entry, "schedule", label, errors, _cron)
        min_interval = _field(entry, "min_interval", label, errors, _duration, required=False)
        include_attached = _field(entry, "include_attached", label, errors, _boolean, required=False, default=False)
        if max_age is not None and max_age <= timedelta(0):
            errors.append(f"{label}: max_age must be more than 0s.")
        if include_attached and purpose not in (None, "attachment"):
            errors.append(f"{label}: include_attached applies to the purpose attachment only.")
        if valid_name:
            names.add(name)
        if purpose is not None:
            purposes.add(purpose)
        if len(errors) == before:
            policies.append(
                Policy(
                    name=name,
                    purpose=purpose,
                    max_age=max_age,
                    grace=grace,
                    schedule=schedule,
                    min_interval=min_interval,
                    include_attached=include_attached,
                )
            )
    if errors:
        raise EntryErrors(errors)
    return tuple(policies)


def _prefix(value: Any) -> str:
    if not isinstance(value, str) or not value.endswith("/") or len(value) > 512:
        raise ValueError("Must end with '/' (for example issues/).")
    try:
        validate_key(value[:-1])
    except KeySchemaError:
        raise ValueError(
            "Must be a relative path of plain segments (no '.', '..', empty segment or backslash)."
        ) from None
    return value


def overlaps(first: str, second: str) -> bool:
    return first.startswith(second) or second.startswith(first)


def parse_prefixes(raw: Any) -> tuple[UnmanagedPrefix, ...]:
    """`storage.unmanaged_prefixes` from JSON text or a list.

    Raises:
        EntryErrors: one message per problem, naming the entry by position and the field. A prefix is the
            operator's own layout, not user data, but it is still not printed: the position is enough.
    """
    entries = _read_entries(raw, "prefix")
    errors: list[str] = []
    found: list[UnmanagedPrefix] = []
    positions: list[int] = []
    for index, entry in enumerate(entries):
        label = f"prefix {_ordinal(index)}"
        if not isinstance(entry, Mapping):
            errors.append(f"{label}: must be an object.")
            continue
        before = len(errors)
        _unknown(entry, {"prefix", "max_age", "schedule"}, label, errors)
        prefix = _field(entry, "prefix", label, errors, _prefix)
        max_age = _field(entry, "max_age", label, errors, _duration, required=False)
        schedule = _field(entry, "schedule", label, errors, _cron)
        if prefix is not None:
            if any(overlaps(prefix, reserved) for reserved in RESERVED_PREFIXES):
                errors.append(f"{label}: prefix overlaps Lethe's own f/, uploads/ or .tmp/.")
            for other_index, other in zip(positions, found, strict=True):
                if overlaps(prefix, other.prefix):
                    errors.append(f"{label}: prefix overlaps prefix {_ordinal(other_index)}.")
        if len(errors) == before:
            found.append(UnmanagedPrefix(prefix=prefix, schedule=schedule, max_age=max_age))
            positions.append(index)
    if errors:
        raise EntryErrors(errors)
    return tuple(found)


def _url(value: Any) -> str:
    from urllib.parse import urlsplit

    if not isinstance(value, str) or len(value) > 2048:
        raise ValueError("Must be an http or https URL.")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # a port that is not a number raises here
    except ValueError:
        raise ValueError("Must be an http or https URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("Must be an http or https URL.")
    return value


def _secrets(value: Any) -> tuple[bytes, ...]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not values or len(values) > 4:
        raise ValueError("Must be a whsec_<base64> secret, or a list of 1 to 4 of them (a rotation).")
    return tuple(decode_secret(item) for item in values)


def _events(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value or any(item not in EVENTS for item in value):
        raise ValueError(f"Must be a non-empty list of {', '.join(EVENTS)}.")
    return tuple(dict.fromkeys(value))


def parse_endpoints(raw: Any) -> tuple[Endpoint, ...]:
    """`webhooks.endpoints` from JSON text or a list.

    Raises:
        EntryErrors: one message per problem, naming the endpoint (by its name when valid, else its position)
            and the field; never a URL or a secret.
    """
    entries = _read_entries(raw, "endpoint")
    errors: list[str] = []
    found: list[Endpoint] = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            errors.append(f"endpoint {_ordinal(index)}: must be an object.")
            continue
        before = len(errors)
        name, label = _named(entry, index, "endpoint", names, errors)
        valid_name = bool(name)
        _unknown(entry, {"name", "url", "secret", "events"}, label, errors)
        url = _field(entry, "url", label, errors, _url)
        secrets = _field(entry, "secret", label, errors, _secrets)
        events = _field(entry, "events", label, errors, _events)
        if valid_name:
            names.add(name)
        if len(errors) == before:
            found.append(Endpoint(name=name, url=url, secrets=secrets, events=events))
    if errors:
        raise EntryErrors(errors)
    return tuple(found)
