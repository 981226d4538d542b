"""The layers hold (D2, STYLE.md): domain imports nothing of the project, no flask below app/api, and the
lifecycle wing reaches content only through the domain and db layers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imports_of(folder: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[path.relative_to(ROOT).as_posix()] = names
    return found


def offenders(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    return {path: sorted(n for n in names if n.startswith(forbidden))
            for path, names in imports_of(folder).items() if any(n.startswith(forbidden) for n in names)}


def test_domain_imports_nothing_of_the_project():
    found = offenders("app/domain", ("app.", "workers", "scheduler", "flask", "psycopg"))
    assert {path: [n for n in names if not n.startswith("app.domain")] for path, names in found.items()
            if any(not n.startswith("app.domain") for n in names)} == {}


def test_lifecycle_reaches_content_only_through_domain_and_db():
    assert offenders("app/lifecycle", ("app.content", "app.api")) == {}


def test_no_flask_outside_the_api():
    for folder in ("app/domain", "app/storage", "app/db", "app/content", "app/lifecycle", "workers", "scheduler"):
        assert offenders(folder, ("flask", "werkzeug")) == {}, folder
