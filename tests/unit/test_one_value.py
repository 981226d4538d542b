"""One value for what a file owns (app/domain/objects.py): every key of a file is built by `FileObjects` from the
schema of app/domain/keys.py, and every key read back is parsed by `objects.parse`. This test reads the code base
for any other key formula: a call of the schema's builders, a text that spells a piece of a key, or a hand-made
split of a key.

The only other reader of the schema is the fs driver, which names the parts of its own multipart emulation
(`ObjectStore.part_keys`): parts are the driver's to name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("app", "workers", "scheduler")
BUILDERS = {"original_key", "variant_key", "part_key", "tail_key", "_file_dir"}
SCHEMA_HOMES = {"app/domain/keys.py", "app/domain/objects.py"}
DRIVER_PARTS = {"app/storage/defaults.py": {"part_key"}}  # parts as objects of their own
# A piece of a key of the schema, as a string literal or the fixed text of an f-string.
KEY_PIECES = re.compile(r"(^|/)(orig-|part-|v-|tail$)|^(f|uploads)/")


def _modules():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def key_formulas(path: str, tree: ast.AST) -> list[str]:
    """Where a module builds or spells a file's key by itself."""
    if path in SCHEMA_HOMES:
        return []
    allowed = DRIVER_PARTS.get(path, set())
    found = []
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "app.domain.keys":
            found += [f"{path}:{node.lineno} imports {a.name}" for a in node.names if a.name in BUILDERS - allowed]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in BUILDERS - allowed
            and ast.unparse(node.value).split(".")[-1] == "keys"
        ):
            found.append(f"{path}:{node.lineno} calls keys.{node.attr}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and " " not in node.value
            and KEY_PIECES.search(node.value)
        ):
            found.append(f"{path}:{node.lineno} spells {node.value!r}")
    return found


def test_no_key_of_a_file_is_built_outside_the_one_value():
    found = [line for path, tree in _modules() for line in key_formulas(path, tree)]
    assert found == []


def test_the_check_finds_each_kind_of_formula():
    """The reader above is not blind: each way a module could build a key by hand is found."""
    samples = {
        "from app.domain.keys import tail_key\n": "imports tail_key",
        "from app.domain import keys\nk = keys.original_key(i, 2)\n": "calls keys.original_key",
        "k = f'uploads/{file_id}/part-{n}'\n": "spells 'uploads/'",
        "k = prefix + '/orig-1'\n": "spells '/orig-1'",
        "name = key.rsplit('/', 1)[1] == 'tail'\n": "spells 'tail'",
    }
    for source, finding in samples.items():
        found = key_formulas("app/content/example.py", ast.parse(source))
        assert any(finding in line for line in found), (source, found)
    # and a driver may name its own parts, nothing else
    assert key_formulas("app/storage/defaults.py", ast.parse("from app.domain.keys import part_key\n")) == []
    assert key_formulas("app/storage/defaults.py", ast.parse("from app.domain.keys import tail_key\n")) != []


def test_the_one_value_names_the_next_original_and_the_tail():
    import uuid

    from app.domain.objects import FileObjects, parse

    file_id = uuid.UUID("0a1b2c3d-0000-4000-8000-000000000001")
    new = FileObjects(file_id)
    assert new.next_original == f"f/0a/1b/{file_id}/orig-1"
    assert FileObjects(file_id, object_key=new.next_original).next_original.endswith("/orig-2")
    assert parse(new.next_original) == (file_id, "original")
    assert parse(new.tail_key) == (file_id, "tail")
    assert new.tail_key in FileObjects(file_id, tail=True).object_keys()


def test_the_originals_a_stripped_image_replaced_and_those_a_gone_row_may_have_left():
    import uuid

    from app.domain.objects import FileObjects

    file_id = uuid.UUID("0a1b2c3d-0000-4000-8000-000000000002")
    first = FileObjects(file_id).next_original
    second = FileObjects(file_id, object_key=first).next_original
    assert FileObjects(file_id, object_key=first).replaced_originals == []
    assert FileObjects(file_id, object_key=second).replaced_originals == [first]
    assert FileObjects(file_id).replaced_originals == []
    # a row gone: orig-1, and the orig-2 an image stored again without its metadata was, are both sought
    gone = FileObjects.of_gone_row(file_id).object_keys()
    assert first in gone and second in gone
