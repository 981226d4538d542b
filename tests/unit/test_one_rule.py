"""One rule for bytes (app/domain/ends.py): whether a file's bytes may go now is answered in one place, and
every removal in the code base passes through it.

- No code outside app/storage calls a store's delete or abort operations: every removal goes through the file
  facade (app/storage/files.py), whose removal methods each take the Clearance the rule answered.
- A Clearance is built by the rule alone (app/domain/ends.py), read by its one reader (app/db/keeps.py).
- The rule itself: a hold keeps everything; attached, slot-kept, drafted and live files keep their content;
  deleted, ended and row-less files are free.
"""

from __future__ import annotations

import ast
import inspect
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.ends import ByteFacts, Clearance, Keep, Reach, clearance_of, keep
from app.storage.files import FileStore

ROOT = Path(__file__).resolve().parents[2]
REMOVALS = {"delete", "delete_many", "abort_upload", "discard_part", "clear_parts"}


def _calls(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                yield path.relative_to(ROOT).as_posix(), node


def test_no_removal_reaches_a_store_but_through_the_file_facade():
    offenders = []
    for folder in ("app", "workers", "scheduler"):
        for path, node in _calls(folder):
            if path.startswith("app/storage/"):
                continue
            receiver = ast.unparse(node.func.value)
            if node.func.attr in {"discard_part", "clear_parts"} or (
                node.func.attr in REMOVALS and receiver.split(".")[-1].endswith("store")
            ):
                offenders.append(f"{path}:{node.lineno} {receiver}.{node.func.attr}")
    assert offenders == []


def test_in_the_storage_wing_only_the_facade_removes_a_files_objects():
    # The drivers implement the operations and the K1 guard forwards them; nothing else there calls them.
    callers = {path for path, node in _calls("app/storage") if node.func.attr in REMOVALS}
    assert callers <= {
        "app/storage/files.py",
        "app/storage/guard.py",
        "app/storage/defaults.py",
        "app/storage/fs.py",
        "app/storage/s3.py",
    }


def test_every_removal_of_the_facade_takes_the_rules_clearance():
    source = ast.parse((ROOT / "app/storage/files.py").read_text())
    (facade,) = [node for node in source.body if isinstance(node, ast.ClassDef) and node.name == "FileStore"]
    for method in facade.body:
        if not isinstance(method, ast.FunctionDef) or method.name.startswith("_"):
            continue
        removes = any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in REMOVALS
            for node in ast.walk(method)
        )
        if removes and method.name != "remove_unmanaged":  # never a file's key: it refuses them
            annotations = {arg.arg: ast.unparse(arg.annotation) for arg in method.args.args if arg.annotation}
            assert annotations.get("clearance") == "Clearance", method.name
    assert "clearance" not in inspect.signature(FileStore.remove_unmanaged).parameters


def test_a_clearance_is_built_by_the_rule_alone():
    builders = []
    for folder in ("app", "workers", "scheduler"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Clearance":
                    builders.append(path.relative_to(ROOT).as_posix())
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "clearance_of":
                    builders.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(builders)) == ["app/db/keeps.py", "app/domain/ends.py"]


ID = uuid.UUID("00000000-0000-4000-8000-000000000001")


@pytest.mark.parametrize(
    "facts, file_scope, stray_scope",
    [
        (ByteFacts(ID, exists=False), None, None),
        (ByteFacts(ID, exists=False, held=True), Keep.HELD, Keep.HELD),  # a hold on an id without a row
        (ByteFacts(ID, exists=True, deleted=True), None, None),
        (ByteFacts(ID, exists=True, deleted=True, held=True), Keep.HELD, Keep.HELD),
        (ByteFacts(ID, exists=True, ended=True), None, None),
        (ByteFacts(ID, exists=True, ended=True, held=True), Keep.HELD, Keep.HELD),
        (ByteFacts(ID, exists=True), Keep.LIVE, None),
        (ByteFacts(ID, exists=True, in_own_draft=True), Keep.DRAFT, None),
        (ByteFacts(ID, exists=True, attached=True), Keep.ATTACHED, None),
        (ByteFacts(ID, exists=True, deleted=True, attached=True), Keep.ATTACHED, None),  # an internal error keeps too
        (ByteFacts(ID, exists=True, deleted=True, in_slot=True), Keep.SLOT, None),
        (ByteFacts(ID, exists=True, deleted=True, in_own_draft=True), None, None),  # a draft keeps no deleted file
    ],
)
def test_the_rule(facts, file_scope, stray_scope):
    assert keep(facts, Reach.FILE) is file_scope
    assert keep(facts, Reach.STRAY) is stray_scope


@given(
    st.lists(
        st.builds(
            ByteFacts,
            file_id=st.uuids(),
            exists=st.booleans(),
            held=st.booleans(),
            attached=st.booleans(),
            in_slot=st.booleans(),
            in_own_draft=st.booleans(),
            deleted=st.booleans(),
            ended=st.booleans(),
        ),
        max_size=20,
        unique_by=lambda f: f.file_id,
    ),
    st.sampled_from(list(Reach)),
)
def test_a_held_file_is_never_freed_and_every_file_is_judged_once(facts, reach):
    cleared = clearance_of(facts, reach)
    assert cleared.freed.isdisjoint(cleared.kept)
    assert cleared.freed | set(cleared.kept) == {one.file_id for one in facts}
    assert all(one.file_id not in cleared for one in facts if one.held)
    assert set(cleared.held()) == {one.file_id for one in facts if one.held}
    assert isinstance(cleared, Clearance)


class _PartsAreObjects:
    """The part-naming half of a driver whose parts are objects of their own (as fs)."""

    @staticmethod
    def part_keys(file_id: str, part_count: int) -> list[str]:
        from app.domain.keys import part_key

        return [part_key(file_id, n) for n in range(1, part_count + 1)]


@given(st.uuids(), st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=30), st.booleans())
def test_the_facade_counts_the_keys_it_names(file_id, revision, parts, tail):
    from app.domain.keys import original_key
    from app.domain.objects import FileObjects

    objects = FileObjects(file_id, original_key(file_id, revision) if revision else None, part_count=parts, tail=tail)
    facade = FileStore(_PartsAreObjects())  # type: ignore[arg-type]
    keys = facade.keys_of(objects)
    assert facade.count_keys(objects) == len(keys) == len(set(keys))
