"""The scan (D13): stream the original to clamd, or mark it `skipped` when no clamd is configured.

The outcome is written under the file's row lock, only if the file is still complete, pending and not
deleted: a job whose file row is gone or deleted ends without error and without writes (D9). Every scan
reaches an end (D19): a file over scan.max_size is not streamed and ends `error` (reason size_limit), as
does one clamd refuses for its size; a scan lost with its process is sent again once by the cleanup and
ended as `error` after that (app/lifecycle/cleanup.py, step j).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from app.content import clamd
from app.content.strip import strip_original
from app.db import files as files_sql
from app.db import sessions as sessions_sql
from app.db.scans import record_checked, record_outcome, scannable
from app.errors import ContentCorrupt
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.scan")


def scan_file(rt: Runtime, file_id: uuid.UUID) -> str | None:
    """Scan one file and record the outcome.

    Returns:
        The outcome written, or None when there was nothing to do.

    Raises:
        clamd.ClamdUnavailable: clamd did not answer; the job retries.
    """
    row = rt.db.read(lambda conn: files_sql.file_by_id(conn, file_id))
    if not scannable(row):
        return None
    row = strip_original(rt, row)  # before any reader can have it: no location in what is scanned and served
    # A complete file without a digest is a direct upload whose completion left the check to this read:
    # its bytes are hashed on their way to clamd, and checked before the outcome is written.
    measure = _Measure() if row.sha256 is None else None
    address = rt.content.clamd_address
    if not address:
        verdict = clamd.Verdict("skipped")
    elif not rt.limits.scan_reads(row.size_bytes):
        verdict = clamd.Verdict("error", "size_limit")  # clamd would refuse it: do not stream it (D19)
    else:
        try:
            chunks = rt.files.read(row)  # a sealed file's plaintext, opened as it streams
            try:
                verdict = clamd.instream(
                    address, measure.through(chunks) if measure else chunks, rt.content.scan_timeout.total_seconds()
                )
            finally:
                chunks.close()
        except ContentCorrupt:
            # Its stored bytes do not open as what was sealed: no scan can vouch for them, and a retry will not
            # heal them. The file ends (error) and is purged.
            measure = None
            verdict = clamd.Verdict("error", "content_corrupt")
    if measure is None:
        written = rt.db.unit_of_work(
            lambda uow: record_outcome(
                uow,
                file_id,
                verdict.outcome,
                rt.clock.now(),
                variants=rt.content.variants,
                reason="content_corrupt" if verdict.reason == "content_corrupt" else None,
            ),
            name="scan.record",
        )
    else:
        assert row.object_key is not None  # a complete file references its original (D3)
        # No scanner took the bytes (the configuration changed after the completion): read them for the digest.
        measured = measure.result() if measure.streamed else rt.files.measure(row)
        expected = rt.db.read(lambda conn: getattr(sessions_sql.session_of(conn, file_id), "expected_sha256", None))
        written = rt.db.unit_of_work(
            lambda uow: record_checked(
                uow, file_id, verdict.outcome, measured, expected, rt.clock.now(), variants=rt.content.variants
            ),
            name="scan.record",
        )
        if written == "failed":
            log_event(
                log,
                "info",
                "upload.failed",
                "upload failed verification",
                file_id=str(file_id),
                reason="checksum_mismatch",
            )
            return written
    if written is not None:
        log_event(
            log, "info", "scan.done", "file scanned", file_id=str(file_id), outcome=written, reason=verdict.reason
        )
    return written


class _Measure:
    """The size and sha256 of the bytes a scan streams (or reads, when no scanner takes them)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0
        self.streamed = False

    def through(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """The chunks as they are, hashed and counted on their way."""
        self.streamed = True
        for chunk in chunks:
            self.digest.update(chunk)
            self.size += len(chunk)
            yield chunk

    def result(self) -> tuple[int, str]:
        """The size and hex sha256 of the bytes seen."""
        return self.size, self.digest.hexdigest()
