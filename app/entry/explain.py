"""`lethe explain FILE_ID | --subject UUID`: why a file is still here, and what ends it; what Lethe holds of a
person."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.entry.ops import one_shot_runtime, uuid_arg


def _print(doc: dict[str, Any]) -> None:
    print(f"file {doc['file_id']}: {doc['state']}" + (f", in store {doc['store']}" if "store" in doc else ""))
    if "bytes_may_go" in doc:
        print(
            f"the one rule for bytes: {doc['the_one_rule']} (bytes may go now: {'yes' if doc['bytes_may_go'] else 'no'})"
        )
    for reason in doc["kept_by"]:
        details = ", ".join(f"{name}: {value}" for name, value in reason.items() if name != "rule")
        print(f"  kept by {reason['rule']}" + (f" ({details})" if details else ""))
    ends = doc["ends"]
    if ends.get("at"):
        print(f"ends by {ends['rule']} at {ends['at']}" + (f" (policy {ends['policy']})" if "policy" in ends else ""))
    else:
        print(f"nothing ends it until: {ends.get('needs')}")
    if "receipt" in doc:
        print(f"receipt: via {doc['receipt']['via']}, purged at {doc['receipt']['purged_at']}")


def cmd_explain(args: argparse.Namespace) -> int:
    """Explain one file (any id: live, deleted, purged or unknown)."""
    from app.lifecycle.explain import explain_file, explain_subject

    if (args.file_id is None) == (args.subject is None):
        print("lethe explain: name a file id, or --subject UUID")
        return 2
    runtime = one_shot_runtime("explain", needs_store=False, commits=False)
    try:
        doc = (
            explain_file(runtime, None, args.file_id)
            if args.file_id is not None
            else explain_subject(runtime, None, args.subject)
        )
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(doc))
    elif args.file_id is not None:
        _print(doc)
    else:
        _print_subject(doc)
    return 0


def _print_subject(doc: dict[str, Any]) -> None:
    print(f"person {doc['subject_id']}:")
    for name in (
        "files_live",
        "bytes_live",
        "files_attached",
        "files_in_drafts",
        "files_deleted_waiting",
        "files_ended_rows",
        "files_held",
        "drafts",
        "messages",
        "events",
    ):
        print(f"  {name.replace('_', ' '):<24} {doc[name]}")
    for hold in doc["holds"]:
        print(f"  held by {hold['id']} ({hold['case_ref']})")
    print(f"ends by: {doc['ends']['needs']}")


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`lethe explain`."""
    explain = commands.add_parser("explain", help="why a file is still here, and what ends it")
    explain.add_argument("file_id", type=uuid_arg, nargs="?", help="the file's id")
    explain.add_argument("--subject", type=uuid_arg, help="instead: what Lethe holds of this person, by rule")
    explain.add_argument("--json", action="store_true", help="print one JSON object")
    explain.set_defaults(func=cmd_explain)
