"""Legal holds: the form of a case reference. A hold must never become a place for names, so the reference is
an opaque token (a ticket number, `holds.case_ref_pattern`), never free text, a person's name or a file name."""

from __future__ import annotations

import re
from functools import lru_cache

# What the database accepts (its CHECK): the outer bound of every configured pattern.
CASE_REF_TOKEN = r"^[A-Za-z0-9._-]{1,64}$"
# The default ticket form: capitals and digits in dash-separated groups ending with a number (CASE-2026-0042,
# LIT-17). A dotted name (Jane.Doe), a file name (scan.pdf) or a bare word (JANE-DOE) is not one.
DEFAULT_CASE_REF_PATTERN = r"^[A-Z][A-Z0-9]{0,15}(-[A-Z0-9]{1,16}){0,3}-[0-9]{1,12}$"


@lru_cache(maxsize=8)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def valid_case_ref(text: str, pattern: str = DEFAULT_CASE_REF_PATTERN) -> bool:
    """Whether `text` is a case reference: it matches the configured pattern whole (`$` alone would take a
    trailing newline: fullmatch) and the token the database accepts (1 to 64 ASCII letters, digits, `.`, `_`,
    `-`)."""
    return (
        isinstance(text, str)
        and _compiled(CASE_REF_TOKEN).fullmatch(text) is not None
        and _compiled(pattern).fullmatch(text) is not None
    )
