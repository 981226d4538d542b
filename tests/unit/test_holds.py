"""The case reference of a legal hold (issue 27) is a token: generated texts either match the pattern whole or
are refused, and the Python rule and the database's CHECK agree on a trailing newline."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from app.domain.holds import CASE_REF_PATTERN, valid_case_ref


def test_tickets_are_case_references():
    for text in ("INC-2026.117", "a", "A" * 64, "case_ref", "2026-12-01"):
        assert valid_case_ref(text)


def test_names_and_free_text_are_not():
    for text in ("", "A" * 65, "Jane Doe", "case 17", "ref\n", "\nref", "ref/1", "réf", "ref;drop", "ref\x00"):
        assert not valid_case_ref(text)


@given(st.text(max_size=80))
def test_the_rule_is_the_whole_pattern(text):
    assert valid_case_ref(text) == (re.fullmatch(CASE_REF_PATTERN.strip("^$"), text) is not None)
