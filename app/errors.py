"""One exception tree (STYLE.md). The HTTP edge turns it into problem+json; nothing else does.

Messages and attributes carry ids, keys of configuration and reasons, never a file name, an object key,
a digest or a token (D15).
"""

from __future__ import annotations

from typing import Any


class LetheError(Exception):
    """Base of every error Lethe raises on purpose."""

    status = 500
    code = "internal_error"
    title = "Internal error"


class NotFound(LetheError):
    status = 404
    code = "not_found"
    title = "Not found"


class Forbidden(LetheError):
    """Visible but not allowed (403); with `scope`, the scope the token lacks (reason `scope_missing`)."""

    status = 403
    code = "forbidden"
    title = "Forbidden"

    def __init__(self, scope: str | None = None):
        super().__init__(self.code)
        self.scope = scope
        self.reason = "scope_missing" if scope else None
        self.detail = f"This needs the `{scope}` scope, which the token does not carry." if scope else None


class ReasonedError(LetheError):
    """An error with a machine-readable `reason` (answered in the problem body)."""

    def __init__(self, reason: str | None = None, detail: str | None = None):
        super().__init__(detail or reason or self.code)
        self.reason = reason
        self.detail = detail


class LinkRefused(ReasonedError):
    """A file link that Lethe did not make, or that expired (403 `link_invalid`, `link_expired`): the same
    answer whatever the file, so that a refused link says nothing of it."""

    status = 403
    code = "forbidden"
    title = "Forbidden"


class NotConfigured(ReasonedError):
    """A capability this installation has not configured (501), with the key that turns it on."""

    status = 501
    code = "not_configured"
    title = "Not configured"


class Conflict(ReasonedError):
    status = 409
    code = "conflict"
    title = "Conflict"


class Gone(ReasonedError):
    status = 410
    code = "gone"
    title = "Gone"


class Unavailable(LetheError):
    status = 503
    code = "unavailable"
    title = "Service unavailable"


class RestorePending(ReasonedError):
    """The database was found to be another than the one a process last read (restored, or recovered to an earlier
    point) and the restore guard says data must wait (503, the guard's reason): raised before anything is read
    through its connection."""

    status = 503
    code = "service_unavailable"
    title = "Service unavailable"


class SchemaMismatch(ReasonedError):
    """The database's migrations are not this release's (a newer release migrated it, or it is not migrated):
    nothing is read or changed through it (503, reason `schema_too_new` or `schema_not_migrated`)."""

    status = 503
    code = "service_unavailable"
    title = "Service unavailable"


class StorageError(LetheError):
    """An object store call failed. Transient by default: the job that met it retries; a request that met
    it answers 503."""

    status = 503
    code = "storage_unavailable"
    title = "Storage unavailable"


class StoreUnknown(StorageError):
    """A file's row names a store that is not configured (file.stores lost it): nothing of the file can be read
    or removed until it is declared again. A request answers 503; a job retries; `lethe stores list` names it."""

    def __init__(self, name: str):
        super().__init__("a file lies in a store that is not configured (see lethe stores list)")
        self.store_name = name


class Throttled(StorageError):
    """The store asked for fewer requests (S3 `SlowDown`, a 503 or a 429): store-wide and transient. The driver
    backs off and retries what is idempotent; what still meets it is retried later, and no file fails for it."""

    code = "storage_throttled"


class ObjectFailed(StorageError):
    """The store answered for one object (or one file's objects) with a refusal: AccessDenied on a key, a
    path component that is not a directory. Other objects are unaffected, so a purge isolates the file it
    belongs to and goes on with the others (D7); a retry later may succeed once an operator fixed it.
    A plain StorageError is store-wide: unreachable, timed out, 5xx."""

    code = "object_failed"

    def __init__(self, message: str, store_code: str = ""):
        super().__init__(message)
        self.store_code = store_code  # the store's own code (S3 error code, errno name): never a key


class ContentCorrupt(ReasonedError):
    """A sealed object of a file did not open (502): a segment or header was altered, the object was cut short,
    or it is not this file's. Never retried (the bytes will not heal); nothing of it is served."""

    status = 502
    code = "content_corrupt"
    title = "Stored content is corrupt"


class WrappedKeyCorrupt(ContentCorrupt):
    """A file's wrapped data key does not open with the key of its id, which opens other files' data keys: this
    row's key was altered or copied from another row (502 `content_corrupt`, never retried). Only the row is
    named, by the caller: never the key id's material, nor anything of the file."""

    def __init__(self) -> None:
        super().__init__(
            "content_corrupt",
            "The file's stored data key does not open with the key that wrapped "
            "the other files of its key id: it was changed in the database.",
        )


class KeyUnavailable(ReasonedError):
    """A file's data key is wrapped by a keyring key this process does not hold (503, reason `key_unavailable`):
    the configuration lost a key that a live file needs. The message names the key id, never a key."""

    status = 503
    code = "key_unavailable"
    title = "Key unavailable"

    def __init__(self, key_id: str, detail: str | None = None):
        super().__init__("key_unavailable", detail or f"The keyring holds no key {key_id!r} (file.keyring).")
        self.key_id = key_id


class KeyMismatch(KeyUnavailable):
    """The keyring holds a key of the id a file's row names, and it does not open the file's data key, and has opened
    none of that id here yet: another key may have been put under that id (a keyring made again). A 503: trouble
    with the keys is the configuration's, and never ends a file the way content that does not open does. Once the
    key has opened others, a row it does not open is that row's fault (WrappedKeyCorrupt)."""

    def __init__(self, key_id: str):
        super().__init__(
            key_id,
            f"The keyring's key {key_id!r} does not open a data key it is said to have "
            "wrapped (file.keyring): not the key that wrapped it.",
        )


class InvalidKey(StorageError):
    """A key broke the key schema (D4): empty, `.` or `..` segment, absolute, or a separator inside a
    client-supplied segment. Permanent: retrying cannot help."""

    code = "invalid_key"


class StoreCallInTransaction(LetheError):
    """D4 K1: an object store call was made while a unit of work was open."""


class ConfigError(LetheError):
    """Bad configuration: a mapping of key name -> messages. Never holds a value."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{key}: {' '.join(messages)}" for key, messages in sorted(errors.items())))


class Unauthorized(ReasonedError):
    """No valid bearer token (D11): answered before anything is looked up, with why (`token_missing`,
    `token_expired`, `token_invalid`), never the token."""

    status = 401
    code = "unauthorized"
    title = "Unauthorized"


class Invalid(ReasonedError):
    """Well-formed input that breaks a rule (422), with a machine-readable reason."""

    status = 422
    code = "invalid_request"
    title = "Invalid request"


class TooLarge(ReasonedError):
    """Too large to take (413): over file.max_size, or (reason `too_large_to_scan`) over scan.max_size while a
    scanner is configured, so that no file waits for a scan that clamd would refuse (D19)."""

    status = 413
    code = "payload_too_large"
    title = "Payload too large"


class QuotaExceeded(TooLarge):
    """A new upload that does not fit its uploader's quota (413 `quota_exceeded`): `fields` go into the problem
    document (the limit, what is held, what the upload asked for; counts only, never a name)."""

    def __init__(self, detail: str, fields: dict[str, Any]):
        super().__init__("quota_exceeded", detail)
        self.fields = fields


class BadRequest(ReasonedError):
    """A request the protocol cannot read (400): a malformed header of a tus request."""

    status = 400
    code = "bad_request"
    title = "Bad request"


class UnsupportedMediaType(ReasonedError):
    """A body of the wrong Content-Type (415)."""

    status = 415
    code = "unsupported_media_type"
    title = "Unsupported media type"


class ChecksumMismatch(ReasonedError):
    """tus's 460: the body of a PATCH does not match its Upload-Checksum; nothing of it was kept."""

    status = 460
    code = "checksum_mismatch"
    title = "Checksum mismatch"
