"""The layers hold (D2, STYLE.md): every arrow of the import direction, checked wing by wing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports_of(folder: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    paths = [ROOT / folder] if folder.endswith(".py") else (ROOT / folder).rglob("*.py")
    for path in paths:
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
    return {
        path: sorted(n for n in names if n.startswith(forbidden))
        for path, names in imports_of(folder).items()
        if any(n.startswith(forbidden) for n in names)
    }


FRAMEWORKS = (
    "flask",
    "werkzeug",
    "psycopg",
    "apscheduler",
    "dramatiq",
    "marshmallow",
    "minio",
    "jwt",
    "prometheus_client",
    "sentry_sdk",
    "yoyo",
    "gunicorn",
)
ENTRY_POINTS = ("app.api", "app.entry", "workers", "scheduler")

# The arrows of the layout: entry, api, workers, scheduler -> content, lifecycle -> runtime -> domain, storage,
# db -> platform. Each rule names what a wing may not import; the test fails on any import that breaks one.
RULES = {
    "app/domain": ("app.", "workers", "scheduler", *FRAMEWORKS),  # pure: only itself (checked below) and stdlib
    "app/storage": ("app.platform", "app.db", "app.runtime", "app.content", "app.lifecycle", *ENTRY_POINTS),
    "app/db": ("app.storage", "app.runtime", "app.content", "app.lifecycle", *ENTRY_POINTS),
    "app/runtime.py": ("app.content", "app.lifecycle", *ENTRY_POINTS),
    "app/content": ("app.lifecycle", *ENTRY_POINTS),  # a slot releases through a function handed in
    "app/lifecycle": ("app.content", *ENTRY_POINTS),
    # the bottom layer: nothing above it, not even for a type (the collaborators' type is app/runtime.py)
    "app/platform": ("app.db", "app.storage", "app.runtime", "app.content", "app.lifecycle", *ENTRY_POINTS),
    "app/api": ("app.entry", "workers", "scheduler"),
}


@pytest.mark.parametrize("folder", sorted(RULES))
def test_each_wing_imports_only_what_its_layer_may(folder):
    found = offenders(folder, RULES[folder])
    if folder == "app/domain":  # the domain may import itself
        found = {path: [n for n in names if not n.startswith("app.domain")] for path, names in found.items()}
        found = {path: names for path, names in found.items() if names}
    assert found == {}


def test_no_flask_outside_the_api():
    for folder in (
        "app/domain",
        "app/storage",
        "app/db",
        "app/content",
        "app/lifecycle",
        "app/platform",
        "workers",
        "scheduler",
    ):
        assert offenders(folder, ("flask", "werkzeug")) == {}, folder


def test_app_root_holds_only_the_wings_and_errors():
    """STYLE.md "When app/ grows": a path says what lives there."""
    root = {path.name for path in (ROOT / "app").iterdir() if not path.name.startswith((".", "__pycache__"))}
    assert root == {
        "__init__.py",
        "errors.py",
        "runtime.py",
        "api",
        "content",
        "lifecycle",
        "domain",
        "db",
        "storage",
        "platform",
        "entry",
    }


def test_no_service_branches_on_the_storage_driver():
    """Issue 22: what differs between drivers is asked of the port (part_keys, sweep_tmp, ...), never by name."""
    import re

    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "app").rglob("*.py")
        if "storage" not in path.relative_to(ROOT).parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"store\.driver\s*[!=]=", line)
    ]
    assert found == []


def module_imports() -> dict[str, set[str]]:
    """Every module of app/, workers/ and scheduler/ and the modules of those it imports (at the top or inside a
    function: an import where it is used is still an arrow)."""
    modules = {}
    for folder in ("app", "workers", "scheduler"):
        for path in (ROOT / folder).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets.update({node.module, *(f"{node.module}.{alias.name}" for alias in node.names)})
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through their imports (Tarjan's strongly connected
    components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other():
    """Not directly, not through others, not inside a function: a cycle (platform and db, or the configuration's
    loader and its tree) makes every module of it part of each of the others."""
    assert cycles(module_imports()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# The settings a content or lifecycle service reads from the configuration itself: lists of configured things
# (endpoints, policies, prefixes) and the journal writer's own section. Every other value comes from the
# runtime's policies (rt.limits, rt.content, rt.lifecycle), built once per process.
CONFIG_READS = {
    "webhooks.endpoints",
    "retention.policies",
    "storage.unmanaged_prefixes",
    "journal.enabled",
    "journal.hash_key",
    "journal.retention",
    "journal.check_interval",
}


def config_reads(tree: ast.AST) -> list[str]:
    """`<section>.<key>` of every `rt.cfg.<section>.<key>` (or `self.rt.cfg...`) in a module."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Attribute)
            and node.value.value.attr == "cfg"
        ):
            found.append(f"{node.value.attr}.{node.attr}")
    return found


def test_services_read_their_values_from_the_runtime_policies_not_the_configuration():
    reads = {
        f"{path.relative_to(ROOT).as_posix()}: {read}"
        for folder in ("content", "lifecycle")
        for path in sorted((ROOT / "app" / folder).rglob("*.py"))
        for read in config_reads(ast.parse(path.read_text()))
        if read not in CONFIG_READS
    }
    assert reads == set()
    assert config_reads(ast.parse("rt.cfg.file.link_ttl\nself.rt.cfg.journal.enabled")) == [
        "file.link_ttl",
        "journal.enabled",
    ]
