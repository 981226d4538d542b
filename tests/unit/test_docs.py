"""Documentation that is generated from code stays current."""

from pathlib import Path

from app.entry.docs_gen import configuration_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_current():
    current = (ROOT / "docs" / "configuration.md").read_text()
    assert current == configuration_markdown(), "docs/configuration.md is stale: run `make docs`"


def test_every_public_function_of_the_inner_wings_has_a_docstring():
    """Issue 22 (the seed's build rules): db, content, domain and api say what each public function does."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    missing = []
    for folder in ("app/db", "app/content", "app/domain", "app/api"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                members = node.body if isinstance(node, ast.ClassDef) else []
                for fn in [node, *members]:
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not fn.name.startswith("_") \
                            and ast.get_docstring(fn) is None:
                        missing.append(f"{path.relative_to(root)}:{fn.lineno} {fn.name}")
    assert missing == []
