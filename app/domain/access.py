"""Who may do what (D11, D12, D13). Pure: rules take the caller's id and scopes and the owner of a thing.

Two questions, always in this order, so that an answer never tells a stranger more than an unknown id:
first **visibility** (not visible: the same 404 as an unknown id), then **scope** (visible without the
scope: 403). The rules differ on purpose where a manager is concerned; each says why.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

READ, WRITE, MANAGE = "files:read", "files:write", "manage"
SCOPES = (READ, WRITE, MANAGE)
RESTRICTED_PURPOSES = ("branding", "gdpr_export")  # written by operators and the application, not users


@dataclass(frozen=True)
class Principal:
    """Who calls (D11): the token's `sub` and the scopes Lethe knows of its `scope`."""

    id: uuid.UUID
    scopes: frozenset[str]


class Caller(Protocol):
    """Who calls, as the rules need it: a Principal, or anything with an id and scopes."""

    @property
    def id(self) -> uuid.UUID:
        """The principal's id (the token's sub)."""

    @property
    def scopes(self) -> frozenset[str]:
        """The principal's scopes Lethe knows."""


def may_read(caller: Caller) -> bool:
    """`files:read`: read files and uploads."""
    return READ in caller.scopes


def may_write(caller: Caller) -> bool:
    """`files:write`: upload, attach, delete."""
    return WRITE in caller.scopes


def is_manager(caller: Caller) -> bool:
    """`manage`: an operator's scope."""
    return MANAGE in caller.scopes


def sees_file(caller: Caller, uploaded_by: uuid.UUID) -> bool:
    """A live file is visible to its uploader and to `manage` (D11)."""
    return caller.id == uploaded_by or is_manager(caller)


def sees_retired_file(caller: Caller, uploaded_by: uuid.UUID) -> bool:
    """A file a retention policy retired is visible to its uploader only (410 file_expired, D16). Not to a
    manager: to everyone else a retired id must look exactly like an unknown one."""
    return caller.id == uploaded_by


def drives_upload(caller: Caller, uploaded_by: uuid.UUID) -> bool:
    """An upload session (its parts, completion, abort, progress) belongs to its uploader alone. Not to a
    manager: a manager sees the file through /files, but an upload is its uploader's resumable channel, and
    another principal sending or completing parts would mix two clients' bytes."""
    return caller.id == uploaded_by


def may_attach(caller: Caller, uploaded_by: uuid.UUID) -> bool:
    """Only the uploader attaches a file, to a message of their own. Not a manager: attaching publishes
    the file under the caller's message, and a manager must not publish someone else's file."""
    return caller.id == uploaded_by


def sees_message(caller: Caller, author_id: uuid.UUID) -> bool:
    """A message is its author's; `manage` may name another author's message (to delete it)."""
    return caller.id == author_id or is_manager(caller)


def may_upload_purpose(caller: Caller, purpose: str) -> bool:
    """Users upload attachments and avatars; branding and GDPR exports come from operators (`manage`)."""
    return purpose not in RESTRICTED_PURPOSES or is_manager(caller)


def may_use_slot(caller: Caller, kind: str, holder_id: uuid.UUID | None, write: bool) -> bool:
    """Slots (D16): an avatar is its principal's, who reads it with `files:read` and sets it with
    `files:write`; `manage` may act on anyone's. The logo is the operators': `manage` only."""
    if kind == "logo":
        return is_manager(caller)
    if holder_id is None or (caller.id != holder_id and not is_manager(caller)):
        return False
    return may_write(caller) if write else may_read(caller)


def may_restore(caller: Caller) -> bool:
    """Bringing back a file a retention policy retired is an operator's decision (D16): `manage` only."""
    return is_manager(caller)


def may_erase(caller: Caller | None) -> bool:
    """Erasing a person, or reading an erasure: `manage` only. None is an operator's command on the host."""
    return caller is None or is_manager(caller)


def may_hold(caller: Caller | None) -> bool:
    """Placing, reading and releasing legal holds: `manage`, or an operator's command (None)."""
    return caller is None or is_manager(caller)


def may_set_quota(caller: Caller | None) -> bool:
    """Setting a principal's quota: `manage`, or an operator's command (None)."""
    return caller is None or is_manager(caller)


def sees_usage(caller: Caller | None, principal_id: uuid.UUID) -> bool:
    """A principal's usage and limits: the principal itself (what it may still upload is its business), `manage`,
    or an operator's command (None)."""
    return caller is None or caller.id == principal_id or is_manager(caller)


def may_read_receipt(caller: Caller | None) -> bool:
    """Deletion receipts are for operators (D16): `manage`, or an operator's command (None)."""
    return caller is None or is_manager(caller)


def delete_answer(caller: Caller, uploaded_by: uuid.UUID, deleted: bool, attached: bool, purpose: str) -> str:
    """deleteFile's answer table (D12), in its order, for a file that exists (no row: `not_found`).

    Returns:
        `delete` (mark it), or a refusal: `not_found` (the same 404 as an unknown id), `forbidden` (403),
        `file_attached` or `purpose_not_deletable` (409). A file deleted before answers 404 to everyone, its
        uploader included, whether its row still waits (the purge delay, a legal hold) or is gone: the answer
        rests on the deletion, never on the row, so that nothing tells a held file from a purged one.
    """
    if deleted:
        return "not_found"
    if not sees_file(caller, uploaded_by):
        return "not_found"
    if not may_write(caller):
        return "forbidden"
    if attached:
        return "file_attached"
    if purpose != "attachment":
        return "purpose_not_deletable"
    return "delete"
