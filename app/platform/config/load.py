"""Loading the configuration (D14): defaults, the optional TOML file named by LETHE_CONFIG, then the
environment; validation by marshmallow, the cross-checks between keys, and the tree built from the values.
Every error names keys, never values."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import tomllib
import typing
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from marshmallow import Schema, ValidationError

from app.domain.durations import format_duration
from app.errors import ConfigError
from app.platform.config.keys import CONFIG_FILE_ENV, S3_MIN_PART_SIZE, Key
from app.platform.config.tree import KEYS, KEYS_BY_NAME, Config


def _attribute(name: str) -> str:
    return name.replace(".", "__")


@functools.cache
def _schema() -> Schema:
    """One schema of every key, made once (a schema loads without keeping anything of what it loaded)."""
    # marshmallow reads dots in an attribute name as nesting; load by the dotted name (data_key) into a
    # flat attribute, so that errors are reported by the key's own name.
    declared = {}
    for key in KEYS:
        field = copy.copy(key.field)
        field.data_key = key.name
        declared[_attribute(key.name)] = field
    return Schema.from_dict(declared)()


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A section's field types, read once (typing.get_type_hints evaluates every annotation of the class)."""
    return typing.get_type_hints(cls)


def _nest(flat: Mapping[str, Any], cls: type = Config, prefix: str = "") -> Any:
    """Build the dataclass tree from validated values by dotted name; durations become timedeltas."""
    values = {}
    hints = _hints(cls)
    for field_info in dataclasses.fields(cls):
        name = prefix + field_info.name
        hint = hints[field_info.name]
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
    if (
        have("file.gc_interval", "privacy.object_delete_delay")
        and values["file.gc_interval"] >= values["privacy.object_delete_delay"]
    ):
        message = "file.gc_interval must be shorter than privacy.object_delete_delay."
        add("file.gc_interval", message)
        add("privacy.object_delete_delay", message)
    if values.get("file.storage.driver") == "s3":
        for name in ("file.s3.endpoint", "file.s3.bucket"):
            if not values.get(name):
                add(name, "Required when file.storage.driver is s3.")
        if have("file.part_size") and values["file.part_size"] < S3_MIN_PART_SIZE:
            add("file.part_size", "Must be at least 5MiB with the s3 driver (the S3 minimum part size).")
    declared = {settings.name for settings in values.get("file.stores", ())}
    # Two stores on one bucket (or one fs root) would each take the other's files for copies no row counts.
    places = {
        ("s3", values.get("file.s3.endpoint"), values.get("file.s3.bucket"))
        if values.get("file.storage.driver") == "s3"
        else ("fs", values.get("file.fs.root"), "")
    }
    for settings in values.get("file.stores", ()):
        place = (
            ("s3", settings.s3.endpoint, settings.s3.bucket)
            if settings.s3 is not None
            else ("fs", settings.fs.root, "")
        )
        if place in places:
            add("file.stores", f"Store {settings.name} uses the bucket (or fs root) of another store.")
        places.add(place)
    if values.get("file.store.primary", "default") not in declared | {"default"}:
        add("file.store.primary", "Must be default or the name of a store in file.stores.")
    if (
        have("file.purge_retry_base", "file.purge_retry_max")
        and not 1 <= values["file.purge_retry_base"] <= values["file.purge_retry_max"]
    ):
        add("file.purge_retry_base", "Must be at least 1s and at most file.purge_retry_max.")
    if have("outbox.relay_age") and values["outbox.relay_age"] < 1:
        add("outbox.relay_age", "Must be at least 1s.")
    if have("file.direct_url_ttl") and not 1 <= values["file.direct_url_ttl"] <= 7 * 86400:
        add("file.direct_url_ttl", "Must be at least 1s and at most 7d (the S3 limit of a presigned URL).")
    if values.get("file.encryption") and "file.keyring" in values and not values["file.keyring"]:
        add(
            "file.keyring",
            "Required when file.encryption is on (the keys that wrap every file's data key); "
            "lethe keys generate ID makes one.",
        )
    if values.get("file.link_secret") and len(values["file.link_secret"]) < 32:
        add("file.link_secret", "Must be at least 32 characters.")
    if have("file.link_ttl") and not 1 <= values["file.link_ttl"] <= 86400:
        add("file.link_ttl", "Must be at least 1s and at most 1d.")
    if have("api.console_session_ttl") and not 60 <= values["api.console_session_ttl"] <= 7 * 86400:
        add("api.console_session_ttl", "Must be at least 1m and at most 7d.")
    if have("file.s3.presign_ttl") and not 1 <= values["file.s3.presign_ttl"] <= 7 * 86400:
        add("file.s3.presign_ttl", "Must be at least 1s and at most 7d (the S3 limit of a presigned URL).")
    elif (
        values.get("file.s3.download") == "redirect"
        and have("file.s3.presign_ttl", "privacy.object_delete_delay")
        and values["file.s3.presign_ttl"] > values["privacy.object_delete_delay"]
    ):
        # A copy handed out before a delete must not outlive the delay the deletion promises. Proxied downloads
        # hand out no URL, so a short delay (a drill's, a test's) needs no presign_ttl of its own there.
        add("file.s3.presign_ttl", "Must be at most privacy.object_delete_delay with file.s3.download redirect.")
    if (
        have("journal.retention", "journal.backup_retention")
        and values["journal.retention"] <= values["journal.backup_retention"]
    ):
        # A backup older than the journal cannot be replayed: what it restores stays restored.
        add("journal.retention", "Must be longer than journal.backup_retention (the longest database backup).")
    if have("journal.write_linger") and values["journal.write_linger"] > 1:
        add("journal.write_linger", "Must be at most 1s (it adds to the journal's lag).")
    if have("journal.write_interval") and values["journal.write_interval"] > 1:
        add("journal.write_interval", "Must be at most 1s (it adds to the journal's lag under load).")
    if have("journal.check_interval") and not 1 <= values["journal.check_interval"] <= 300:
        add("journal.check_interval", "Must be at least 1s and at most 5m.")
    if values.get("api.public_url") and not str(values["api.public_url"]).startswith(("http://", "https://")):
        add("api.public_url", "Must start with http:// or https://.")
    if have("auth.leeway") and values["auth.leeway"] > 300:
        add("auth.leeway", "Must be at most 5m (a longer leeway keeps expired tokens valid).")
    for name, least in (
        ("file.s3.timeout", 1),
        ("database.pool_timeout", 0.1),
        ("database.connect_timeout", 2),
        ("database.statement_timeout", 0.1),
        ("database.keepalive", 1),
        ("schedule.leader_timeout", 3),
    ):
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
        messages_of = exc.normalized_messages()  # type: ignore[no-untyped-call]
        errors = {name: list(messages) for name, messages in messages_of.items()}
        loaded = exc.valid_data or {}
    loaded = {name.replace("__", "."): value for name, value in loaded.items()}
    # Cross-checks run on the keys that parsed, so one run reports every problem at once.
    for name, messages in _cross_checks(loaded).items():
        errors.setdefault(name, []).extend(messages)
    for name in unknown:
        errors.setdefault(name, []).append("Unknown configuration key.")
    if errors:
        raise ConfigError(errors)
    config: Config = _nest(loaded)
    return config


def with_changes(cfg: Config, changes: Mapping[str, Any]) -> Config:
    """A copy of `cfg` with some keys changed (`with_changes(cfg, {"file.gc_batch_size": 2})`), re-validated."""
    raw = {key.name: cfg.get(key.name) for key in KEYS}
    raw.update(changes)
    return build(raw)


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


def explicitly_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment or the `LETHE_CONFIG` file sets the key `name` (not its default)."""
    environ = os.environ if environ is None else environ
    if KEYS_BY_NAME[name].env in environ:
        return True
    path = environ.get(CONFIG_FILE_ENV)
    if not path:
        return False
    try:
        with open(path, "rb") as handle:
            return name in _flatten_file(tomllib.load(handle))
    except (OSError, tomllib.TOMLDecodeError):
        return False


def describe_default(key: Key) -> str:
    """The default as an operator writes it, for docs and the chart."""
    if isinstance(key.default, bool):
        return "true" if key.default else "false"
    return str(key.default)
