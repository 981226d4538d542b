"""Legal holds (issue 27): the form of a case reference. A hold must never become a place for names, so the
reference is a token (a ticket number), not free text."""

from __future__ import annotations

import re

CASE_REF_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
_CASE_REF = re.compile(CASE_REF_PATTERN)  # always fullmatch: `$` alone would take a trailing newline


def valid_case_ref(text: str) -> bool:
    """Whether `text` is a case reference: 1 to 64 of letters, digits, `.`, `_` and `-` (ASCII only)."""
    return isinstance(text, str) and _CASE_REF.fullmatch(text) is not None
