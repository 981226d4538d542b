"""Documentation that is generated from code stays current."""

from pathlib import Path

from app.entry.docs_gen import configuration_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_current():
    current = (ROOT / "docs" / "configuration.md").read_text()
    assert current == configuration_markdown(), "docs/configuration.md is stale: run `make docs`"
