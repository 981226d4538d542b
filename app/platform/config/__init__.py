"""Configuration (D14): named keys with a type, a default, a description and an environment variable.

Sources, later wins: the defaults below, the optional TOML file named by `LETHE_CONFIG`, then the
environment (`file.unattached_ttl` -> `LETHE_FILE_UNATTACHED_TTL`). Values are validated with marshmallow.

Every error message names the key and never the value: a misplaced secret (a password pasted into the
wrong variable) must not end up in a terminal, a CI log or a pod's events.
"""

from __future__ import annotations

from app.domain.durations import format_duration, parse_duration
from app.platform.config.keys import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    S3_MIN_PART_SIZE,
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
    key,
    parse_size,
)
from app.platform.config.load import build, describe_default, explicitly_set, load, with_changes
from app.platform.config.tree import KEYS, KEYS_BY_NAME, Config

__all__ = [
    "CONFIG_FILE_ENV",
    "ENV_PREFIX",
    "S3_MIN_PART_SIZE",
    "Duration",
    "Durations",
    "EntryList",
    "Flag",
    "Key",
    "KeyringField",
    "LimitNumber",
    "LimitSize",
    "Number",
    "Origins",
    "RateField",
    "Size",
    "Text",
    "format_duration",
    "key",
    "parse_duration",
    "parse_size",
    "build",
    "describe_default",
    "explicitly_set",
    "load",
    "with_changes",
    "KEYS",
    "KEYS_BY_NAME",
    "Config",
]
