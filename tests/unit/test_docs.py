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
                    if (
                        isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and not fn.name.startswith("_")
                        and ast.get_docstring(fn) is None
                    ):
                        missing.append(f"{path.relative_to(root)}:{fn.lineno} {fn.name}")
    assert missing == []


# -- the docs stand alone, and their lists are the code's ------------------------------------------------------

import re  # noqa: E402

import yaml  # noqa: E402

DOCS = [
    ROOT / "README.md",
    ROOT / "bench" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "helm" / "lethe" / "values.yaml",
    ROOT / "helm" / "lethe" / "templates" / "NOTES.txt",
    *sorted((ROOT / "app" / "db" / "migrations").glob("*.sql")),  # an operator reads them before a migration
]


def test_the_docs_point_at_nothing_a_reader_of_the_repository_lacks():
    """No path outside the repository, no issue number, no source document: a reader needs the repository only;
    every section D<n> a doc cites is a section of docs/design.md."""
    design = (ROOT / "docs" / "design.md").read_text()
    sections = set(re.findall(r"^## (D\d+)\.", design, re.M))
    assert sections == {f"D{n}" for n in range(1, 22)}
    found = []
    for path in DOCS:
        text = path.read_text()
        for pattern in (r"\.\./shared|shared/(DESIGN|STYLE|tools|seeds)", r"\b[Ii]ssues? \d+", r"\bseeds? 00\d"):
            found += [f"{path.relative_to(ROOT)}: {match.group(0)}" for match in re.finditer(pattern, text)]
        found += [
            f"{path.relative_to(ROOT)}: {cited} (not in docs/design.md)"
            for cited in set(re.findall(r"\bD(\d{1,2})\b", text))
            if f"D{cited}" not in sections
        ]
    assert found == []


def test_the_operator_docs_list_what_the_code_has():
    from app.platform.config import KEYS
    from app.platform.jobs.broker import QUEUES

    deploy = (ROOT / "docs" / "deploy.md").read_text()
    operations = (ROOT / "docs" / "operations.md").read_text()
    # every alert of the chart is in deploy.md's table
    rules = (ROOT / "helm" / "lethe" / "templates" / "prometheusrule.yaml").read_text()
    alerts = set(re.findall(r"- alert: (\w+)", rules))
    assert len(alerts) >= 8 and alerts == set(re.findall(r"^\| `(Lethe\w+)`", deploy, re.M))
    # every secret key's variable is in the existingSecret list
    secret_list = deploy[deploy.index("To keep secrets out of Helm") :][:800]
    assert {key.env for key in KEYS if key.secret} <= set(re.findall(r"`(LETHE_\w+)`", secret_list))
    # every queue: the chart's default worker.queues, the worker.queues line of deploy.md, the quorum migration
    values = yaml.safe_load((ROOT / "helm" / "lethe" / "values.yaml").read_text())
    assert set(values["worker"]["queues"]) == set(QUEUES)
    scaling = deploy[deploy.index("`worker.queues`") :][:500]
    assert all(f"`{queue}`" in scaling for queue in QUEUES)
    migration = operations[operations.index("## Moving to quorum queues") :]
    assert re.search(r"for q in " + " ".join(QUEUES) + ";", migration)
