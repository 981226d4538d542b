"""Access rules (app/domain/access.py). Pure, without fixtures."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from app.domain import access

OWNER_ID, OTHER_ID = uuid.uuid4(), uuid.uuid4()


@dataclass(frozen=True)
class Who:
    id: uuid.UUID
    scopes: frozenset[str]


UPLOADER = Who(OWNER_ID, frozenset({access.READ, access.WRITE}))
STRANGER = Who(OTHER_ID, frozenset({access.READ, access.WRITE}))
MANAGER = Who(OTHER_ID, frozenset({access.READ, access.WRITE, access.MANAGE}))
READER = Who(OWNER_ID, frozenset({access.READ}))


@pytest.mark.parametrize(
    "rule, uploader, stranger, manager",
    [
        (access.sees_file, True, False, True),
        (access.sees_retired_file, True, False, False),
        (access.drives_upload, True, False, False),
        (access.may_attach, True, False, False),
        (access.sees_message, True, False, True),
    ],
)
def test_who_sees_and_acts_on_a_thing_of_OWNER(rule, uploader, stranger, manager):
    assert (rule(UPLOADER, OWNER_ID), rule(STRANGER, OWNER_ID), rule(MANAGER, OWNER_ID)) == (
        uploader,
        stranger,
        manager,
    )


def test_scopes():
    assert access.may_read(READER) and not access.may_write(READER) and not access.is_manager(READER)
    assert access.may_write(STRANGER) and access.is_manager(MANAGER)


@pytest.mark.parametrize(
    "purpose, user, manager",
    [("attachment", True, True), ("avatar", True, True), ("branding", False, True), ("gdpr_export", False, True)],
)
def test_who_may_upload_which_purpose(purpose, user, manager):
    assert (access.may_upload_purpose(UPLOADER, purpose), access.may_upload_purpose(MANAGER, purpose)) == (
        user,
        manager,
    )


def test_who_may_use_which_slot():
    # An avatar: its principal (read with files:read, set with files:write), or manage; never a stranger
    assert access.may_use_slot(UPLOADER, "avatar", OWNER_ID, write=True)
    assert access.may_use_slot(READER, "avatar", OWNER_ID, write=False)
    assert not access.may_use_slot(READER, "avatar", OWNER_ID, write=True)
    assert not access.may_use_slot(STRANGER, "avatar", OWNER_ID, write=False)
    assert access.may_use_slot(MANAGER, "avatar", OWNER_ID, write=True)
    # The logo: manage only, whoever holds it
    assert access.may_use_slot(MANAGER, "logo", None, write=True)
    assert not access.may_use_slot(UPLOADER, "logo", None, write=False)


@pytest.mark.parametrize("rule", [access.may_restore, access.may_erase, access.may_read_receipt])
def test_operator_only_rules(rule):
    assert rule(MANAGER) and not rule(UPLOADER) and not rule(STRANGER)


def test_an_operators_command_on_the_host_may_erase_and_read_receipts():
    assert access.may_erase(None) and access.may_read_receipt(None)


@pytest.mark.parametrize(
    "caller, deleted, attached, purpose, answer",
    [
        (UPLOADER, False, False, "attachment", "delete"),
        (UPLOADER, True, False, "attachment", "not_found"),  # deleted before: the same 404 for everyone, held or not
        (MANAGER, True, False, "attachment", "not_found"),  # a deleted file looks purged to everyone else
        (STRANGER, False, False, "attachment", "not_found"),
        (STRANGER, True, True, "avatar", "not_found"),
        (READER, False, True, "avatar", "forbidden"),  # visible, then the scope
        (UPLOADER, False, True, "avatar", "file_attached"),  # the attachment before the purpose (D12's order)
        (UPLOADER, False, False, "avatar", "purpose_not_deletable"),
        (MANAGER, False, False, "attachment", "delete"),
    ],
)
def test_delete_answer_follows_the_table_in_its_order(caller, deleted, attached, purpose, answer):
    assert access.delete_answer(caller, OWNER_ID, deleted, attached, purpose) == answer
