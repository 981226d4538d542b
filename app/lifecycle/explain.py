"""Why is this file still here, and what ends it: the explainer (`explainFile`, `lethe explain`, `manage` only).

It reads the facts the rules read (app/db/explain.py) and answers from the rules themselves: the one rule for
bytes (`keep`, app/domain/ends.py) says whether the bytes may go now and why not; the cleanup's windows and the
retention policies say what ends the file and when. Never a name, a key or a digest: ids, rules and times.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.db import explain as sql
from app.db import receipts as receipts_sql
from app.db.explain import FileFacts
from app.domain import access
from app.domain.access import Principal
from app.domain.ends import ByteFacts, Keep, Reach, keep
from app.domain.states import is_deliverable
from app.errors import Forbidden

if TYPE_CHECKING:
    from app.platform.config import Config
    from app.runtime import Runtime

# Every reason the one rule keeps a file's bytes, as the explainer names it (a test fails when a Keep has none).
KEPT_BY = {Keep.HELD: "hold", Keep.ATTACHED: "attached", Keep.SLOT: "slot", Keep.DRAFT: "draft", Keep.LIVE: "live"}
# Every cleanup step, by letter: the rule of the explainer that stands for it, or why it concerns no one file (a
# test fails when a step has neither).
STEP_RULES = {
    "a": "upload_open",
    "b": "never_attached",
    "c": "failed_row",
    "d": "purge_failed",
    "g": "receipt_expires",
    "h": "slot_released",
    "j": "scan_pending",
    "o": "variants_pending",
    "r": "store_copy",
}
NOT_PER_FILE = {
    "e": "the fs driver's temporary files",
    "f": "the backlog's gauges",
    "i": "running erasures: an erasure marks its files deleted (delete_delay)",
    "k": "gauges",
    "l": "message tombstones",
    "m": "direct uploads' second abort (the file is already purged)",
    "n": "webhook deliveries",
    "p": "reading an old file's type (it stays)",
    "q": "rate-limit windows",
}


def explain_file(rt: Runtime, principal: Principal | None, file_id: uuid.UUID) -> dict[str, Any]:
    """Why the file is still here and what ends it (`manage`; principal None: an operator's command).

    Raises:
        Forbidden: the caller lacks `manage`.
    """
    if not access.may_read_receipt(principal):
        raise Forbidden("manage")
    now = rt.clock.now()
    facts = rt.db.read(lambda conn: sql.file_facts(conn, file_id))
    if facts is not None:
        return answer(facts, rt.cfg, now)
    receipt = rt.db.read(lambda conn: receipts_sql.receipt_of(conn, file_id))
    holds = rt.db.read(lambda conn: sql.held_by_id(conn, file_id))
    kept = [_holds(holds)] if holds else []
    if receipt is not None:
        shown = {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in receipt.__dict__.items()
            if name != "file_id"
        }
        shown["deferred_by_hold"] = str(receipt.deferred_by_hold) if receipt.deferred_by_hold else None
        expires = receipt.purged_at + rt.lifecycle.receipt_ttl
        return _doc(file_id, "purged", kept, _end("receipt_expires", expires), receipt=shown)
    needs = "nothing: no row, no receipt (never uploaded here, or its receipt expired)"
    return _doc(file_id, "unknown", kept, {"rule": None, "at": None, "needs": needs})


def explain_subject(rt: Runtime, principal: Principal | None, subject_id: uuid.UUID) -> dict[str, Any]:
    """What Lethe holds of a person, counted by rule, and what ends it: the answer needed before an erasure
    (`manage`; principal None: an operator's command).

    Raises:
        Forbidden: the caller lacks `manage`.
    """
    if not access.may_read_receipt(principal):
        raise Forbidden("manage")
    facts = rt.db.read(lambda conn: sql.subject_facts(conn, subject_id))
    holds = [
        {"id": str(hold_id), "case_ref": ref} for hold_id, ref in zip(facts.hold_ids, facts.hold_refs, strict=True)
    ]
    counts = {name: value for name, value in facts.__dict__.items() if name not in ("hold_ids", "hold_refs")}
    if holds:
        ends: dict[str, Any] = {"rule": "hold", "at": None, "needs": "the release of the holds on the person"}
    elif any(counts.values()):
        ends = {"rule": "erasure", "at": None, "needs": "an erasure (createErasure, lethe erase --subject)"}
    else:
        ends = {"rule": None, "at": None, "needs": "nothing: Lethe holds nothing of this person"}
    return {"subject_id": str(subject_id), "holds": holds, **counts, "ends": ends}


def answer(facts: FileFacts, cfg: Config, now: datetime) -> dict[str, Any]:
    """The explanation of a file that has a row, from its facts, the configuration's windows and the time."""
    deleted = facts.deleted_at is not None
    kept: list[dict[str, Any]] = []
    if facts.held:
        kept.append(_holds(list(zip(facts.hold_ids, facts.hold_refs, strict=True))))
    if facts.messages:
        kept.append({"rule": "attached", "messages": facts.messages})
    if facts.slots:
        kept.append({"rule": "slot", "slots": facts.slots})
    if facts.in_own_draft and not deleted and not facts.ended:
        kept.append({"rule": "draft"})
    if facts.session_state == "open":
        kept.append({"rule": "upload_open", "until": _iso(facts.session_expires_at)})
    if facts.upload_state == "complete" and facts.scan_status == "pending" and not deleted:
        kept.append({"rule": "scan_pending"})
    if facts.variants_state == "pending" and not deleted:
        kept.append({"rule": "variants_pending"})
    if deleted and facts.deleted_at is not None and not facts.held:
        kept.append({"rule": "delete_delay", "until": _iso(facts.deleted_at + cfg.privacy.object_delete_delay)})
    if facts.purge_error is not None:
        kept.append(
            {
                "rule": "purge_failed",
                "store_answer": facts.purge_error,
                "next_attempt": _iso(facts.purge_next_attempt_at),
            }
        )
    if facts.copies:
        kept.append({"rule": "store_copy", "stores": facts.copies})
    bytes_facts = ByteFacts(
        facts.file_id,
        exists=True,
        held=facts.held,
        attached=bool(facts.messages),
        in_slot=bool(facts.slots),
        in_own_draft=facts.in_own_draft,
        deleted=deleted,
        ended=facts.ended,
    )
    why = keep(bytes_facts, Reach.FILE)
    state = "deleted" if deleted else "live"
    return _doc(
        facts.file_id,
        state,
        kept,
        _ends(facts, cfg, now),
        bytes_may_go=why is None,
        the_one_rule=KEPT_BY[why] if why is not None else "free",
        upload_state=facts.upload_state,
        scan_status=facts.scan_status,
        purpose=facts.purpose,
        uploaded_by=str(facts.uploaded_by),
        store=facts.store,
    )


def _ends(facts: FileFacts, cfg: Config, now: datetime) -> dict[str, Any]:
    """What ends the file next, and when; or what someone must do first."""
    if facts.held:
        return {"rule": "hold", "at": None, "needs": "the release of its legal holds"}
    if facts.deleted_at is not None:
        return _end("purge", facts.deleted_at + cfg.privacy.object_delete_delay)
    if facts.ended:
        if facts.objects_purged_at is None:
            return _end("purge", facts.last_change_at + cfg.privacy.object_delete_delay)
        if facts.purpose == "attachment" and not facts.messages:
            return _end("failed_row", facts.last_change_at + cfg.file.failed_row_ttl)
        return {"rule": None, "at": None, "needs": "a deletion (its objects are gone; its row stays for its uploader)"}
    if facts.session_state == "open" and facts.session_expires_at is not None:
        return _end("upload_open", facts.session_expires_at)
    candidates: list[dict[str, Any]] = []
    for policy in cfg.retention.policies:
        if policy.purpose == facts.purpose and (policy.include_attached or not facts.messages):
            retires = facts.created_at + policy.max_age
            candidates.append({**_end("retention", retires), "policy": policy.name})
    if facts.messages:
        needs = "the deletion of the messages attaching it"
        return min(candidates, key=_at) if candidates else {"rule": None, "at": None, "needs": needs}
    if facts.slots:
        return {"rule": "slot_released", "at": None, "needs": "its slot to keep another file, or the slot's clearing"}
    deliverable = is_deliverable(facts.upload_state, facts.scan_status)
    if facts.purpose == "attachment" and deliverable:
        if facts.in_own_draft:
            candidates.append({"rule": "draft", "at": None, "needs": "its uploader's draft to let it go"})
        else:
            candidates.append(_end("never_attached", facts.last_change_at + cfg.file.unattached_ttl))
    elif facts.purpose in ("avatar", "branding") and facts.upload_state != "uploading":
        candidates.append(_end("slot_released", facts.last_change_at + cfg.file.unattached_ttl))
    timed = [candidate for candidate in candidates if candidate["at"] is not None]
    if timed:
        return min(timed, key=_at)
    if candidates:
        return candidates[0]
    if facts.upload_state == "complete" and facts.scan_status == "pending":
        return {"rule": "scan_pending", "at": None, "needs": "its scan's outcome"}
    return {"rule": None, "at": None, "needs": "a deletion: no rule ends this file by itself"}


def _holds(holds: list[tuple[uuid.UUID, str]]) -> dict[str, Any]:
    return {"rule": "hold", "holds": [{"id": str(hold_id), "case_ref": case_ref} for hold_id, case_ref in holds]}


def _end(rule: str, at: datetime) -> dict[str, Any]:
    return {"rule": rule, "at": at.isoformat()}


def _at(candidate: dict[str, Any]) -> str:
    return str(candidate["at"])


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _doc(
    file_id: uuid.UUID, state: str, kept: list[dict[str, Any]], ends: dict[str, Any], **more: Any
) -> dict[str, Any]:
    return {"file_id": str(file_id), "state": state, "kept_by": kept, "ends": ends, **more}
