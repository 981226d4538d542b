"""The suite's external services: a service that is not there skips its tests locally and fails them in CI, and
the run ends with a line naming it (tests/conftest.py prints MISSING_SERVICES)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = bool(os.environ.get("CI"))
MISSING_SERVICES: dict[str, str] = {}  # service -> what failed, for the summary at the end of the run


def start_or_missing(server, what: str):
    """Start one of the suite's own servers (clamd, SeaweedFS, PgBouncer); a binary that is not installed or
    a server that does not start is a missing service: a skip locally, a failure in CI."""
    if server.binary is None:
        service_missing(what, "not installed; .ci/run installs it")
    try:
        return server.start()
    except RuntimeError as exc:
        service_missing(what, str(exc))


def service_missing(what: str, why: str = "not reachable") -> NoReturn:
    """Skip locally; fail loudly in CI (a skipped test must not hide a missing service there)."""
    MISSING_SERVICES.setdefault(what, why)
    if IN_CI:
        pytest.fail(f"{what}: {why}, and CI must not skip: start it (see .ci/run)", pytrace=False)
    pytest.skip(f"{what}: {why}")
