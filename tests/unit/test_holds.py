"""The case reference of a legal hold is an opaque ticket number: the default pattern takes tickets and refuses
names and file names; any configured pattern stays inside the token the database accepts; generated texts
either match both whole or are refused."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from app.domain.holds import CASE_REF_TOKEN, DEFAULT_CASE_REF_PATTERN, valid_case_ref


def test_tickets_are_case_references():
    for text in ("CASE-2026-0042", "LIT-17", "INC-2026-117", "JIRA-1", "A-1", "C" + "-9" * 3):
        assert valid_case_ref(text), text


def test_names_file_names_and_free_text_are_not():
    for text in (
        "Jane.Doe",
        "jane.doe",
        "JANE-DOE",
        "Jane Doe",
        "scan.pdf",
        "report-2026.pdf",
        "IMG_2041.jpg",
        "CASE-2026.117",
        "case-17",
        "",
        "A" * 65,
        "case 17",
        "LIT-17\n",
        "\nLIT-17",
        "LIT/17",
        "LÏT-17",
        "LIT-17;drop",
        "LIT-17\x00",
        "2026-17",
    ):
        assert not valid_case_ref(text), text


def test_a_configured_pattern_decides_within_the_token():
    dotted = r"^[A-Za-z0-9.]+$"  # an installation that wants its old dotted tickets
    assert valid_case_ref("INC.2026.117", dotted)
    assert not valid_case_ref("INC 2026", dotted)
    assert not valid_case_ref("x" * 65, r"^x+$")  # never past what the database accepts


@given(st.text(max_size=80))
def test_the_rule_is_both_patterns_whole(text):
    expected = (
        re.fullmatch(CASE_REF_TOKEN.strip("^$"), text) is not None
        and re.fullmatch(DEFAULT_CASE_REF_PATTERN.strip("^$"), text) is not None
    )
    assert valid_case_ref(text) == expected
