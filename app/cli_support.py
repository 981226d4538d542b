"""Shared start-up steps of every role: load the configuration or exit 2 naming the keys (D14)."""

from __future__ import annotations

import sys
from typing import Mapping

from app import config
from app.errors import ConfigError

EXIT_CONFIG = 2


def print_config_errors(error: ConfigError, stream=None) -> None:
    stream = stream or sys.stderr
    print("lethe: bad configuration:", file=stream)
    for key, messages in sorted(error.errors.items()):
        env = config.KEYS_BY_NAME[key].env if key in config.KEYS_BY_NAME else None
        where = f" ({env})" if env else ""
        print(f"  {key}{where}: {' '.join(messages)}", file=stream)


def load_config_or_exit(role: str, environ: Mapping[str, str] | None = None) -> config.Config:
    """Load the configuration; on any error print every bad key (never a value) and exit with status 2."""
    try:
        return config.load(environ)
    except ConfigError as exc:
        print_config_errors(exc)
        sys.exit(EXIT_CONFIG)
