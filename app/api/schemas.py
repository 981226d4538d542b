"""Marshmallow schemas of the API (strict types; unknown fields are rejected: marshmallow's RAISE)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from marshmallow import Schema, ValidationError, fields, post_dump, pre_dump, validate, validates_schema

from app.domain.holds import CASE_REF_TOKEN
from app.domain.keys import VARIANTS
from app.domain.states import PURPOSES, SESSION_STATES, SHOWN_SCAN_STATUSES, UPLOAD_STATES, shown_scan_status
from app.domain.uploads import MAX_NAME_LENGTH, NAME_PATTERN

SEGMENT = r"^[A-Za-z0-9:_-]{1,128}$"
SEGMENT_RE = re.compile(SEGMENT)  # always used with fullmatch: `$` alone accepts a trailing newline
MIME_RE = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
MAX_IDS = 1000


class FullMatch(validate.Regexp):
    """validate.Regexp that must match the whole value. Python's `$` also matches before a trailing newline,
    so `re.match` let "id\n" through every pattern here (and into a CHECK that refused it with a 500). The
    OpenAPI document still shows the pattern (apispec reads Regexp), which JSON Schema reads as whole."""

    def __call__(self, value: Any) -> Any:
        if self.regex.fullmatch(value) is None:
            raise ValidationError(self._format_error(value))
        return value

    def _format_error(self, value: Any) -> str:
        return str(self.error)  # never the value (D15)


class SafeString(fields.String):
    """A string PostgreSQL can store: no NUL and no unpaired surrogate (either made a request answer 500)."""

    default_error_messages = {"unsafe": "Must not contain NUL or unpaired surrogate characters."}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text: str = super()._deserialize(value, attr, data, **kwargs)
        if "\x00" in text or _SURROGATE.search(text):
            raise self.make_error("unsafe")
        return text


_SURROGATE = re.compile("[\ud800-\udfff]")


class NoNulls(Schema):
    """Dumps omit members whose value is None: no JSON null in an answer or an event (D6)."""

    @post_dump
    def _drop_nulls(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {key: value for key, value in data.items() if value is not None}


class ProblemSchema(Schema):
    type = fields.String(required=True)
    title = fields.String(required=True)
    status = fields.Integer(required=True)
    code = fields.String(required=True)
    reason = fields.String()
    detail = fields.String()
    errors = fields.Dict()
    quota = fields.Dict(
        metadata={
            "description": "413 quota_exceeded: the quota the upload would pass (`purpose`: null for all the "
            "principal's files), its `limit`, the `usage` held now and the `reservation` asked for, in bytes and "
            "files."
        }
    )


class ThumbnailSchema(Schema):
    """A variant of an image file: its name, size in pixels and type (never a key or a digest)."""

    name = fields.String(required=True, validate=validate.OneOf(VARIANTS))
    width = fields.Integer(required=True, strict=True)
    height = fields.Integer(required=True, strict=True)
    type = fields.String(required=True)


class FileSchema(NoNulls):
    """A file as clients and events see it (the payload of `file.updated` is {"file": File})."""

    id = fields.UUID(required=True)
    uploaded_by = fields.UUID(required=True)
    purpose = fields.String(required=True, validate=validate.OneOf(PURPOSES))
    original_name = fields.String(required=True)
    mime_type = fields.String(required=True)
    size_bytes = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    upload_state = fields.String(required=True, validate=validate.OneOf(UPLOAD_STATES))
    scan_status = fields.String(
        required=True,
        validate=validate.OneOf(SHOWN_SCAN_STATUSES),
        metadata={"description": "not_scanned: a failed upload, never scanned."},
    )
    created_at = fields.DateTime(required=True)
    thumbnails = fields.List(
        fields.Nested(ThumbnailSchema),
        required=True,
        dump_default=list,
        metadata={
            "description": "The file's image variants ready to serve "
            "(GET /files/{id}/variants/{name}); empty for any other file."
        },
    )
    sha256 = fields.String(validate=FullMatch(r"^[0-9a-f]{64}$"))
    scope_id = fields.UUID()
    scanned_at = fields.DateTime()

    @pre_dump
    def _shown(self, file: Any, **kwargs: Any) -> Any:
        """A failed upload's scan status shows that it was never scanned, rather than pending."""
        if dataclasses.is_dataclass(file) and not isinstance(file, type):
            values = dataclasses.asdict(file)  # a typed row (FileRow)
        else:
            values = file._asdict() if hasattr(file, "_asdict") else file
        if not isinstance(values, dict) or "scan_status" not in values:
            return file
        shown = shown_scan_status(values.get("upload_state", ""), values["scan_status"])
        return file if shown == values["scan_status"] else {**values, "scan_status": shown}


class UploadCreateSchema(Schema):
    name = SafeString(
        required=True,
        validate=[
            validate.Length(min=1, max=MAX_NAME_LENGTH, error=f"The name must be 1 to {MAX_NAME_LENGTH} characters."),
            FullMatch(NAME_PATTERN, error="The name must not contain control characters."),
        ],
        metadata={"description": "The file's name, stored as given; never used in a key."},
    )
    size_bytes = fields.Integer(
        required=True,
        strict=True,
        validate=validate.Range(min=0),
        metadata={
            "description": "The file's size in bytes; an empty file (0) has nothing to send: complete it at once (tus: Upload-Length 0 is complete when created)."
        },
    )
    mime_type = SafeString(required=True, validate=FullMatch(MIME_RE, error="Not a media type such as text/plain."))
    sha256 = SafeString(
        validate=FullMatch(r"^[0-9a-fA-F]{64}$", error="Not a hex sha256 digest."),
        metadata={"description": "Optional hex sha256 checked at completion."},
    )
    purpose = fields.String(load_default="attachment", validate=validate.OneOf(PURPOSES))
    scope_id = fields.UUID(metadata={"description": "Optional channel or room the file was uploaded into."})
    transfer = fields.String(
        load_default="api",
        validate=validate.OneOf(["api", "direct"]),
        metadata={
            "description": "api (default): the parts are sent through the API; direct (S3 only): the answer carries a "
            "presigned PUT URL per part and the bytes go straight to the store."
        },
    )


class PartUrlSchema(Schema):
    number = fields.Integer(required=True)
    url = fields.String(required=True, metadata={"description": "PUT the part's bytes here (no token needed)."})
    expires_at = fields.DateTime(required=True)


class UploadSchema(NoNulls):
    file_id = fields.UUID(required=True)
    transfer = fields.String(required=True, validate=validate.OneOf(["api", "direct", "tus"]))
    parts = fields.List(
        fields.Nested(PartUrlSchema),
        metadata={"description": "Direct uploads, when created: a presigned PUT URL per part."},
    )
    state = fields.String(required=True, validate=validate.OneOf(SESSION_STATES))
    part_size = fields.Integer(required=True)
    part_count = fields.Integer(required=True)
    expires_at = fields.DateTime(required=True)
    completed_at = fields.DateTime()
    parts_received = fields.List(fields.Integer(), required=True)


class UploadViewSchema(Schema):
    file = fields.Nested(FileSchema, required=True)
    upload = fields.Nested(UploadSchema, required=True)


class PartSchema(Schema):
    part_number = fields.Integer(required=True)
    size_bytes = fields.Integer(required=True)


class MessagePutSchema(Schema):
    file_ids = fields.List(fields.UUID(), required=True, validate=validate.Length(max=MAX_IDS))


class BatchDeleteSchema(Schema):
    ids = fields.List(
        fields.UUID(),
        required=True,
        validate=validate.Length(min=1, max=MAX_IDS),
        metadata={"description": "1 to 1,000 file ids; each is answered as deleteFile would."},
    )


class BatchDeleteResultSchema(NoNulls):
    id = fields.UUID(required=True)
    status = fields.Integer(
        required=True,
        validate=validate.OneOf((204, 404, 409)),
        metadata={"description": "What deleteFile answers for this id alone."},
    )
    reason = fields.String(
        metadata={"description": "`not_found` with 404; `file_attached` or `purpose_not_deletable` with 409."}
    )


class BatchDeleteResultsSchema(Schema):
    results = fields.List(
        fields.Nested(BatchDeleteResultSchema),
        required=True,
        metadata={"description": "One result per id, in request order."},
    )


class MessageDeleteQuerySchema(Schema):
    author_id = fields.UUID(
        metadata={"description": "With `manage`: the author whose message is deleted (default: the caller)."}
    )


class MessageSchema(Schema):
    id = fields.String(required=True)
    author_id = fields.UUID(required=True)
    created_at = fields.DateTime(required=True)
    file_ids = fields.List(fields.UUID(), required=True)


class DraftPutSchema(Schema):
    text = SafeString(load_default="", validate=validate.Length(max=65536))
    file_ids = fields.List(fields.UUID(), load_default=list, validate=validate.Length(max=MAX_IDS))


class DraftSchema(Schema):
    key = fields.String(required=True)
    text = fields.String(required=True)
    file_ids = fields.List(fields.UUID(), required=True)
    updated_at = fields.DateTime(required=True)


class DraftListSchema(Schema):
    drafts = fields.List(fields.Nested(DraftSchema), required=True)


class EventsQuerySchema(Schema):
    after = fields.Integer(
        load_default=0,
        validate=validate.Range(min=0, max=2**62),
        metadata={"description": "Cursor: the id of the last event seen (0 for the start)."},
    )
    limit = fields.Integer(load_default=100, validate=validate.Range(min=1, max=1000))


class EventSchema(NoNulls):
    id = fields.Integer(required=True)
    type = fields.String(required=True)
    schema_version = fields.Integer(required=True)
    resource_kind = fields.String(required=True)
    resource_id = fields.UUID(required=True)
    actor_id = fields.UUID()
    created_at = fields.DateTime(required=True)
    redacted = fields.Boolean(required=True)
    payload = fields.Dict(required=True)


class EventListSchema(Schema):
    events = fields.List(fields.Nested(EventSchema), required=True)
    next_after = fields.Integer(required=True, metadata={"description": "Pass as `after` for the next page."})


class ReceiptSchema(NoNulls):
    """A deletion receipt (D16): how and when a file was deleted and purged, and how many of its keys were
    deleted and confirmed absent by a read of the store. Nothing else: no uploader, name, size or digest."""

    file_id = fields.UUID(required=True)
    via = fields.String(
        required=True,
        metadata={
            "description": "file (its uploader's deleteFile), manager "
            "(deleteFile of another's file by `manage`), "
            "message, cleanup_unattached, cleanup_failed, "
            "cleanup_unheld, retention, slot, erasure, restore "
            "(applied again from the deletion journal after a "
            "restore of the database)"
        },
    )
    marked_at = fields.DateTime(required=True)
    purged_at = fields.DateTime(required=True)
    keys_deleted = fields.Integer(required=True)
    keys_confirmed_absent = fields.Integer(required=True)
    deferred_by_hold = fields.UUID(
        metadata={"description": "A legal hold deferred the purge: the hold released last. Absent when no hold did."}
    )
    deferred_from = fields.DateTime(
        metadata={"description": "The deferral's start: the later of the mark and the first covering hold's placement."}
    )
    deferred_until = fields.DateTime(metadata={"description": "The deferral's end: the last covering hold's release."})
    removal_began_at = fields.DateTime(
        metadata={"description": "When the removal of the file's bytes began (the point of no return)."}
    )
    hold_too_late = fields.Boolean(
        metadata={
            "description": "True when a legal hold covering the file was placed "
            "after its removal had begun: its bytes could not be "
            "kept."
        }
    )
    variants_deleted = fields.Integer(
        metadata={
            "description": "How many image variants of the file were recorded (their keys are among keys_deleted)."
        }
    )
    keys_locked = fields.Integer(
        metadata={
            "description": "How many versions of the file's objects a bucket's object "
            "lock keeps until its retain-until date: sealed under the "
            "file's data key, destroyed when its removal began, so that "
            "nothing opens them."
        }
    )
    stores = fields.List(
        fields.String(),
        metadata={
            "description": "The stores (by name, file.stores) the file's objects were removed from: the one that "
            "held it, and any a migration copied it to or from."
        },
    )


class SlotPutSchema(Schema):
    file_id = fields.UUID(
        required=True,
        metadata={
            "description": "A complete, deliverable file of the slot's purpose (avatar or branding), the holder's own."
        },
    )


class SlotSchema(Schema):
    file_id = fields.UUID(required=True)


class ErasureRequestSchema(Schema):
    subject_id = fields.UUID(required=True, metadata={"description": "The principal whose data is erased."})


class ErasureSchema(NoNulls):
    """An erasure (D16): its state and counts, and the receipts of the files it purged. The subject is shown
    while it runs and forgotten once it is complete."""

    id = fields.UUID(required=True)
    state = fields.String(required=True, validate=validate.OneOf(["running", "complete", "failed"]))
    reason = fields.String()
    subject_id = fields.UUID()
    created_at = fields.DateTime(required=True)
    finished_at = fields.DateTime()
    files_marked = fields.Integer(required=True)
    files_purged = fields.Integer(required=True)
    keys_confirmed_absent = fields.Integer(required=True)
    messages_removed = fields.Integer(required=True)
    drafts_removed = fields.Integer(required=True)
    receipts = fields.List(fields.Nested(ReceiptSchema), required=True, dump_default=list)


class HoldRequestSchema(Schema):
    """A legal hold: exactly one of `subject_id` and `file_id`, and a case reference."""

    subject_id = fields.UUID(metadata={"description": "A principal: every file they uploaded, now and later."})
    file_id = fields.UUID(metadata={"description": "One file (it must still have a row: not purged yet)."})
    case_ref = fields.String(
        required=True,
        validate=FullMatch(
            CASE_REF_TOKEN,
            error="A case reference is 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-' (a ticket number, never free text).",
        ),
        metadata={
            "description": "An opaque ticket number of the installation's form (holds.case_ref_pattern; "
            "by default capitals and digits ending with a number, as CASE-2026-0042): never "
            "a name, a file name or free text (422 case_ref_invalid).",
            "reason": "case_ref_invalid",
        },
    )

    @validates_schema
    def _one_target(self, data: dict[str, Any], **kwargs: Any) -> None:
        if ("subject_id" in data) == ("file_id" in data):
            raise ValidationError("Give exactly one of subject_id and file_id.", "_schema")


class HoldSchema(NoNulls):
    """A legal hold: its target, case reference, times, how many deleted files it holds back (live while it is
    active; as it was at its release after), and how many it could not keep."""

    id = fields.UUID(required=True)
    subject_id = fields.UUID(
        metadata={
            "description": "Absent for a file hold, and once a released hold forgot "
            "the person after their erasure (subject_forgotten)."
        }
    )
    file_id = fields.UUID()
    subject_forgotten = fields.Boolean(
        required=True,
        metadata={
            "description": "True once the person a released subject hold named was erased: the record keeps ids, "
            "times and counts only."
        },
    )
    case_ref = fields.String(required=True)
    created_at = fields.DateTime(required=True)
    released_at = fields.DateTime(metadata={"description": "Absent while the hold is in force."})
    files_deferred = fields.Integer(
        required=True,
        metadata={"description": "Deleted files whose bytes this hold keeps (another hold may cover them too)."},
    )
    files_lost = fields.Integer(
        required=True,
        metadata={
            "description": "Files the hold covers whose removal had begun before it was placed: their bytes could not "
            "be kept (their rows and receipts say so). Fixed at the placement."
        },
    )


class HoldsQuerySchema(Schema):
    after = fields.UUID(metadata={"description": "Cursor: the id of the last hold seen (absent for the start)."})
    limit = fields.Integer(load_default=100, validate=validate.Range(min=1, max=1000))


class HoldListSchema(NoNulls):
    holds = fields.List(fields.Nested(HoldSchema), required=True)
    next_after = fields.UUID(metadata={"description": "The cursor of the next page; absent on the last page."})


class ContentQuerySchema(Schema):
    disposition = fields.String(
        load_default="attachment",
        validate=validate.OneOf(["attachment", "inline"]),
        metadata={
            "description": "inline: shown by the browser, for a raster image, audio "
            "or video whose bytes are the declared type; anything else is an "
            "attachment of application/octet-stream."
        },
    )


class _Duration(fields.String):
    """A duration as the configuration writes it (90s, 10m, 1h), of at most six digits: its form is checked on the
    text, before anything converts it (a number of thousands of digits overflowed the conversion)."""

    FORM = r"^[1-9][0-9]{0,5}(s|m|h|d)$"

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("metadata", {})["pattern"] = self.FORM  # the OpenAPI document states the form
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        from datetime import timedelta

        from app.domain.durations import parse_duration

        text = super()._deserialize(value, attr, data, **kwargs)
        if re.fullmatch(self.FORM, text) is None:
            raise ValidationError("Not a duration such as 90s or 10m.")
        return timedelta(seconds=parse_duration(text))


class LinkCreateSchema(Schema):
    disposition = fields.String(load_default="attachment", validate=validate.OneOf(["attachment", "inline"]))
    variant = fields.String(
        validate=validate.OneOf(VARIANTS), metadata={"description": "A variant of the file instead of its original."}
    )
    ttl = _Duration(
        metadata={
            "description": "How long the link works (default and longest: file.link_ttl; a longer "
            "one is cut to it, as `expires_at` says)."
        }
    )


class LinkSchema(Schema):
    url = fields.String(
        required=True, metadata={"description": "Works without an Authorization header; names no file, name or person."}
    )
    expires_at = fields.DateTime(required=True)


class FilesQuerySchema(Schema):
    uploader = fields.UUID(metadata={"description": "With `manage`: another uploader's files (default: the caller's)."})
    purpose = fields.String(validate=validate.OneOf(PURPOSES))
    state = fields.String(validate=validate.OneOf(UPLOAD_STATES))
    after = fields.String(
        validate=FullMatch(r"^[A-Za-z0-9_-]{32}$"), metadata={"description": "Cursor: the `next` of the previous page."}
    )
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=200))


class FileListSchema(NoNulls):
    files = fields.List(fields.Nested(FileSchema), required=True)
    next = fields.String(metadata={"description": "The cursor of the next page; absent on the last page."})


def _limit(description: str) -> fields.Integer:
    return fields.Integer(
        strict=True,
        allow_none=True,
        validate=validate.Range(min=0, max=2**63 - 1),
        metadata={"description": description},
    )


class QuotaLimitSchema(Schema):
    """Limits of one purpose: left out, that count is not limited for the purpose alone; null, no limit."""

    max_bytes = _limit("Most bytes; null: no limit.")
    max_files = _limit("Most files; null: no limit.")


# One member per purpose (an object of known names, so the contract says which: an unknown purpose is 422)
QuotaPurposesSchema = Schema.from_dict(
    {purpose: fields.Nested(QuotaLimitSchema) for purpose in PURPOSES}, name="QuotaPurposesSchema"
)


class QuotaRequestSchema(Schema):
    """A principal's own limits, replacing any it had. A limit left out is the installation's default
    (quotas.default_bytes, quotas.default_files); null is no limit; `{}` returns the principal to the defaults."""

    max_bytes = _limit("Most bytes of all its files; null: no limit.")
    max_files = _limit("Most files in all; null: no limit.")
    purposes = fields.Nested(
        QuotaPurposesSchema, metadata={"description": "Limits of the files of one purpose, besides those of all files."}
    )


class CountSchema(Schema):
    used = fields.Integer(
        required=True, metadata={"description": "Held by complete files (deleted ones until purged)."}
    )
    reserved = fields.Integer(required=True, metadata={"description": "Reserved by uploads in progress."})
    limit = fields.Integer(required=True, allow_none=True, metadata={"description": "The limit; null: none."})


class PurposeUsageSchema(Schema):
    bytes = fields.Nested(CountSchema, required=True)
    files = fields.Nested(CountSchema, required=True)


class HeldSchema(Schema):
    bytes = fields.Integer(required=True)
    files = fields.Integer(required=True)


class UsageSchema(PurposeUsageSchema):
    """What a principal holds and may hold (variants of images count against the installation, not here)."""

    principal_id = fields.UUID(required=True)
    awaiting_purge = fields.Nested(
        HeldSchema,
        required=True,
        metadata={"description": "Deleted files still counted: their purge is due after privacy.object_delete_delay."},
    )
    held_by_holds = fields.Nested(
        HeldSchema,
        required=True,
        metadata={"description": "Of those, the ones a legal hold keeps: counted until the hold's release and purge."},
    )
    purposes = fields.Dict(
        keys=fields.String(),
        values=fields.Nested(PurposeUsageSchema),
        required=True,
        metadata={"description": "Per purpose the principal holds files of or has a limit for."},
    )
    quota = fields.Nested(
        QuotaRequestSchema,
        required=True,
        allow_none=True,
        metadata={"description": "The principal's own limits as set; null: the installation's defaults alone."},
    )


class ExplanationSchema(Schema):
    file_id = fields.UUID(required=True)
    state = fields.String(
        required=True, metadata={"description": "live, deleted (its row kept), purged (a receipt) or unknown."}
    )
    kept_by = fields.List(
        fields.Dict(),
        required=True,
        metadata={
            "description": "Every rule keeping its bytes now, each {rule, ...}: hold (holds: id, case_ref), attached "
            "(messages), slot (slots), draft, upload_open (until), scan_pending, variants_pending, delete_delay "
            "(until), purge_failed (store_answer, next_attempt), store_copy (stores)."
        },
    )
    ends = fields.Dict(
        required=True,
        metadata={
            "description": "What ends it next: {rule, at} (purge, upload_open, never_attached, failed_row, "
            "retention with its policy, slot_released, receipt_expires), or {rule, at: null, needs}: what must "
            "happen first."
        },
    )
    bytes_may_go = fields.Boolean(metadata={"description": "Whether the one rule for bytes lets them go now."})
    the_one_rule = fields.String(
        metadata={"description": "The rule's answer: free, or hold, attached, slot, draft, live."}
    )
    upload_state = fields.String()
    scan_status = fields.String()
    purpose = fields.String()
    uploaded_by = fields.UUID()
    store = fields.String(metadata={"description": "The store that holds its objects."})
    receipt = fields.Dict(metadata={"description": "A purged file's receipt (getReceipt)."})
