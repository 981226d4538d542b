"""This process's identity: a random id, made anew in every process (a fork included), named on the leases it
takes (a PATCH's write lease, a completion's lease), so that what a dead process left can be told apart."""

from __future__ import annotations

import os
import uuid

_made: tuple[int, uuid.UUID] | None = None


def process_id() -> uuid.UUID:
    """The id of this process (a forked child gets its own)."""
    global _made
    if _made is None or _made[0] != os.getpid():
        _made = (os.getpid(), uuid.uuid4())
    return _made[1]
