"""The key table's parts (D14): how a key is declared (key(), Key), the marshmallow fields that parse and
validate values, and the validators; every error message names the key and never the value."""

from __future__ import annotations

import dataclasses
import re
import typing
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from marshmallow import ValidationError, fields, validate

from app.domain.durations import parse_duration
from app.platform.config.entries import EntryErrors
from app.platform.keys import KeyringError, parse_keyring

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


class Duration(fields.Field):  # type: ignore[type-arg]  # marshmallow's Field is generic in 3.x only
    """A duration, written as `90s`, `15m`, `24h`, `7d`; parsed to seconds for the cross-checks, and a
    timedelta in the Config."""

    default_error_messages = {"invalid": "Not a duration (write it as 90s, 15m, 24h or 7d)."}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            return parse_duration(value)
        except (ValueError, TypeError):
            raise self.make_error("invalid") from None


class Size(fields.Field):  # type: ignore[type-arg]
    """A size in bytes, written as a number or with a unit (`8MiB`)."""

    default_error_messages = {"invalid": "Not a size (write it as bytes or as 8MiB, 1GiB)."}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            return parse_size(value)
        except (ValueError, TypeError):
            raise self.make_error("invalid") from None


class _NoLimitWhenEmpty(fields.Field):  # type: ignore[type-arg]
    """A limit's field: empty (or None) is no limit, and nothing to check; anything else parses as its kind."""

    def __init__(self, **kwargs: Any):
        super().__init__(allow_none=True, **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if value is None or value == "":
            return None
        return super()._deserialize(value, attr, data, **kwargs)

    def _validate(self, value: Any) -> None:
        if value is not None:
            super()._validate(value)


class LimitSize(_NoLimitWhenEmpty, Size):
    """A size in bytes, or empty: no limit (None)."""

    default_error_messages = {"invalid": "Not a size (write it as bytes or as 10GiB; empty: no limit)."}


class LimitNumber(_NoLimitWhenEmpty, fields.Integer):
    """A whole number, or empty: no limit (None)."""

    default_error_messages = {"invalid": "Not a whole number (empty: no limit)."}


class RateField(fields.Field):  # type: ignore[type-arg]
    """A rate limit, `600/1m` (requests per window, from 1s to 1d), or empty: no limit (None)."""

    default_error_messages = {
        "invalid": "Not a rate (write it as 600/1m: requests per window of 1s to 1d; empty: none)."
    }

    def __init__(self, **kwargs: Any):
        super().__init__(allow_none=True, **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        from app.domain.rates import Rate, parse_rate

        if value is None or isinstance(value, Rate):
            return value  # already parsed (Config.replace)
        try:
            return parse_rate(str(value))
        except ValueError:
            raise self.make_error("invalid") from None


class EntryList(fields.Field):  # type: ignore[type-arg]
    """A list of objects as JSON text (or a list, from the TOML file), parsed by a function of the domain
    that names each bad entry and field, never a value."""

    def __init__(self, parse: Callable[[Any], Any], item_type: type, **kwargs: Any):
        super().__init__(**kwargs)
        self.parse, self.item_type = parse, item_type

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, tuple) and all(isinstance(item, self.item_type) for item in value):
            return value  # already parsed (Config.replace)
        try:
            return self.parse(value)
        except EntryErrors as exc:
            raise ValidationError(exc.messages) from None


class Origins(fields.Field):  # type: ignore[type-arg]
    """A list of web origins (`https://app.example.com`), comma-separated (or a list, from the TOML file), or
    `*` for any; empty for none. The errors never repeat a value."""

    default_error_messages = {"invalid": "Not a list of origins (write https://host[:port], comma-separated, or *)."}
    _ORIGIN = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$")

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, (list, tuple)):
            value = [item.strip().rstrip("/") if isinstance(item, str) else item for item in value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise self.make_error("invalid")
        if any(item != "*" and not self._ORIGIN.fullmatch(item) for item in value):
            raise self.make_error("invalid")
        return tuple(value)


class Durations(fields.Field):  # type: ignore[type-arg]
    """A list of durations, comma-separated (`5s,5m,30m`, or a list from the TOML file), each more than 0s; a
    tuple of timedeltas in the Config. The errors never repeat a value."""

    default_error_messages = {"invalid": "Not a list of durations (write them as 5s,5m,30m,2h, each more than 0s)."}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, tuple) and all(isinstance(item, timedelta) for item in value):
            return value  # already parsed (Config.replace)
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if not isinstance(value, (list, tuple)) or not value:
            raise self.make_error("invalid")
        try:
            parsed = tuple(timedelta(seconds=parse_duration(item)) for item in value)
        except (ValueError, TypeError):
            raise self.make_error("invalid") from None
        if any(item <= timedelta(0) for item in parsed):
            raise self.make_error("invalid")
        return parsed


class KeyringField(fields.Field):  # type: ignore[type-arg]
    """The keyring (file.keyring): `id:base64` entries separated by commas, the first current (or a list of them,
    from the TOML file). The errors name entries by position and id, never a key."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            return parse_keyring(value)
        except KeyringError as exc:
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


def _regex(value: str) -> None:
    try:
        re.compile(value)
    except re.error:
        raise ValidationError("Not a regular expression.") from None


def _url_scheme(*schemes: str, several: bool = False) -> Callable[[str], None]:
    """A URL of one of these schemes (or, with `several`, a list of them separated by ';': the nodes of one
    cluster, tried in turn)."""

    def check(value: str) -> None:
        parts = value.split(";") if several and value else [value]
        if value and not all(part.startswith(tuple(f"{scheme}://" for scheme in schemes)) for part in parts):
            listed = " or ".join(s + "://" for s in schemes)
            raise ValidationError(
                f"Must be empty or URLs separated by ';', each starting with {listed}."
                if several
                else f"Must be empty or a URL starting with {listed}."
            )

    return check


def _conninfo(value: str) -> None:
    """A PostgreSQL connection string in any form libpq takes: a postgresql:// URL (several hosts, a unix socket
    directory as `host=`), `key=value` keywords, or `service=`. The message never repeats the value."""
    if not value:
        return
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(value)
    except ProgrammingError:
        params = None
    ports = str((params or {}).get("port") or "5432").split(",")
    if params is None or not all(port.isdigit() and 0 < int(port) < 65536 for port in ports if port):
        raise ValidationError(
            "Must be empty or a PostgreSQL connection string libpq takes: a URL "
            "(postgresql://user@host:5432/db, several hosts as host-a:5432,host-b:5432) or "
            "key=value keywords (host=... dbname=..., service=...)."
        )


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
    field: fields.Field  # type: ignore[type-arg]
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
            LimitSize: "size or empty",
            LimitNumber: "integer or empty",
            RateField: "rate or empty",
            Flag: "boolean",
            Number: "integer",
            EntryList: "JSON list",
            Origins: "list of origins",
            Durations: "list of durations",
            KeyringField: "keyring",
        }.get(type(self.field), "string")


def key(field: fields.Field[Any], default: Any, description: str, secret: bool = False) -> Any:
    """Declare a configuration key where it lives: on its section's dataclass, beside its Python type (issue
    22: a key is written once; KEYS is read from the tree). The arguments are Key's."""
    return dataclasses.field(metadata={"key": (field, default, description, secret)})


def _keys_of(cls: type, prefix: str = "") -> list[Key]:
    found: list[Key] = []
    hints = typing.get_type_hints(cls)
    for field_info in dataclasses.fields(cls):
        hint = hints[field_info.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            found += _keys_of(hint, f"{prefix}{field_info.name}.")
        else:
            field, default, description, secret = field_info.metadata["key"]
            found.append(Key(prefix + field_info.name, field, default, description, secret))
    return found
