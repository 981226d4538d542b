"""The client: one method per operation of /openapi.json (OPERATIONS says which), uploads that survive a
cut connection, streaming downloads that check the ETag, and pages read as iterators."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, TypeVar

import httpx

from lethe_client.errors import LetheError
from lethe_client.models import (
    BatchDeleteResult,
    Draft,
    Erasure,
    Event,
    Explanation,
    File,
    Hold,
    Link,
    Message,
    PartUrl,
    Receipt,
    Upload,
    UploadView,
    Usage,
    load,
)

T = TypeVar("T")
Source = bytes | str | os.PathLike[str] | BinaryIO
CHUNK = 1024 * 1024

# Each operationId of /openapi.json and the method that performs it (the tus operations are the transfer
# tusclient speaks for `upload(..., transfer="tus")`). A test fails when the server has one this lacks.
OPERATIONS: dict[str, str] = {
    "createUpload": "begin_upload",
    "getUpload": "get_upload",
    "putUploadPart": "put_part",
    "createUploadPartUrl": "part_url",
    "completeUpload": "complete_upload",
    "abortUpload": "abort_upload",
    "tusOptions": "upload",
    "tusCreateUpload": "upload",
    "tusOptionsUpload": "upload",
    "tusGetOffset": "upload",
    "tusPatchUpload": "upload",
    "tusTerminateUpload": "terminate_tus_upload",
    "listFiles": "files",
    "getFile": "file",
    "deleteFile": "delete",
    "batchDeleteFiles": "delete_many",
    "getFileContent": "download",
    "getFileVariant": "download_variant",
    "createFileLink": "link",
    "restoreFile": "restore",
    "getLinkContent": "download_link",
    "putMessage": "attach",
    "deleteMessage": "delete_message",
    "listDrafts": "drafts",
    "putDraft": "put_draft",
    "deleteDraft": "delete_draft",
    "listEvents": "events",
    "getReceipt": "receipt",
    "getAvatar": "avatar",
    "putAvatar": "set_avatar",
    "deleteAvatar": "remove_avatar",
    "getLogo": "logo",
    "putLogo": "set_logo",
    "deleteLogo": "remove_logo",
    "createErasure": "erase",
    "getErasure": "erasure",
    "listHolds": "holds",
    "placeHold": "place_hold",
    "getHold": "hold",
    "releaseHold": "release_hold",
    "setQuota": "set_quota",
    "getUsage": "usage",
    "explainFile": "explain",
}


class UploadInterrupted(Exception):
    """A part could not be sent after its retries: `resume_upload(file_id, source)` sends what the server lacks."""

    def __init__(self, file_id: str, cause: BaseException):
        super().__init__(f"upload {file_id} interrupted: {cause}")
        self.file_id = file_id
        self.cause = cause


@dataclass
class Download:
    """A streaming download: iterate it (or `read()`), then close it (a `with` block does). `etag` is the
    version read; `content_range` is set for a range."""

    response: httpx.Response
    etag: str | None
    content_range: str | None
    owner: httpx.Client | None = None  # the plain client a redirect to the store was followed with

    def __iter__(self) -> Iterator[bytes]:
        yield from self.response.iter_bytes(CHUNK)

    def read(self) -> bytes:
        return b"".join(self)

    def close(self) -> None:
        self.response.close()
        if self.owner is not None:
            self.owner.close()

    def __enter__(self) -> Download:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """Lethe's HTTP API with a bearer token.

    Args:
        base_url: where Lethe answers (`http://127.0.0.1:8080`); the API is under `/api/v1`.
        token: a bearer token (`files:read`, `files:write`; `manage` for holds, erasures, receipts, quotas).
        retries: how often a part, or a request that met an outage (503, 429, a cut connection), is tried again.
        backoff_s: the first wait between tries, doubled each time (a Retry-After answer sets its own).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retries: int = 4,
        backoff_s: float = 0.5,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.retries = retries
        self.backoff_s = backoff_s
        self.http = httpx.Client(
            base_url=self.base_url + "/api/v1",
            headers={"Authorization": f"Bearer {token}", "User-Agent": "lethe-client-python"},
            timeout=timeout_s,
            transport=transport,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------------------------

    def _send(
        self, method: str, path: str, *, stream: bool = False, retry: bool | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One request, tried again after an outage when `retry`: by default the requests whose repetition
        answers as the first would (GET, HEAD, PUT); a POST or DELETE is sent once, since a retry after a lost
        answer would meet what the first did (a 404, a second link)."""
        retry = method in ("GET", "HEAD", "PUT") if retry is None else retry
        follow = kwargs.pop("follow_redirects", True)
        attempt = 0
        while True:
            try:
                request = self.http.build_request(method, path, **kwargs)
                response = self.http.send(request, stream=stream, follow_redirects=follow)
            except httpx.TransportError:
                if not retry or attempt >= self.retries:
                    raise
                self._wait(attempt, None)
                attempt += 1
                continue
            if response.status_code < 400:
                return response
            if stream:
                response.read()
            error = _problem(response)
            if retry and error.retryable and attempt < self.retries:
                self._wait(attempt, response.headers.get("Retry-After"))
                attempt += 1
                continue
            raise error

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff_s * (2**attempt)
        if retry_after and retry_after.isdigit():
            delay = min(float(retry_after), 60.0)
        time.sleep(delay)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    def _as(self, cls: type[T], method: str, path: str, **kwargs: Any) -> T:
        return load(cls, self._json(method, path, **kwargs))

    # -- uploads ----------------------------------------------------------------------------------------------

    def upload(
        self,
        source: Source,
        *,
        name: str | None = None,
        purpose: str = "attachment",
        mime_type: str = "application/octet-stream",
        transfer: str = "parts",
        scope_id: str | None = None,
    ) -> File:
        """Upload bytes, a file by its path, or a binary stream, and return the file as the completion left it
        (its scan may still be pending: `wait_ready`). `transfer`: `parts` (Lethe's native parts, each
        retried), `tus` (tus 1.0 through tusclient) or `direct` (parts straight to the store, where the
        installation allows it). A native upload cut off raises UploadInterrupted: `resume_upload` goes on.
        """
        with _opened(source) as (stream, size):
            name = name or _name_of(source)
            if transfer == "tus":
                return self._tus(stream, size, name, purpose, mime_type)
            digest = _sha256(stream)
            body: dict[str, Any] = {"name": name, "size_bytes": size, "mime_type": mime_type, "purpose": purpose}
            body["sha256"] = digest
            if scope_id is not None:
                body["scope_id"] = scope_id
            if transfer == "direct":
                body["transfer"] = "direct"
            view = self.begin_upload(body)
            try:
                self._send_parts(view.upload, stream, size)
            except (httpx.TransportError, LetheError) as exc:
                if isinstance(exc, LetheError) and not exc.retryable:
                    raise
                raise UploadInterrupted(view.file.id, exc) from exc
            return self.complete_upload(view.file.id)

    def resume_upload(self, file_id: str, source: Source) -> File:
        """Send the parts the server does not have of an interrupted upload (the same bytes), then complete it."""
        with _opened(source) as (stream, size):
            view = self.get_upload(file_id)
            self._send_parts(view.upload, stream, size)
            return self.complete_upload(file_id)

    def _send_parts(self, upload: Upload, stream: BinaryIO, size: int) -> None:
        have = set(upload.parts_received)
        for number in range(1, upload.part_count + 1):
            if number in have:
                continue
            stream.seek((number - 1) * upload.part_size)
            data = stream.read(min(upload.part_size, size - (number - 1) * upload.part_size))
            if upload.transfer == "direct":
                self._put_direct(upload.file_id, number, data)
            else:
                self.put_part(upload.file_id, number, data)

    def _put_direct(self, file_id: str, number: int, data: bytes) -> None:
        for attempt in range(self.retries + 1):
            url = self.part_url(file_id, number).url
            try:
                answer = httpx.put(url, content=data, timeout=self.http.timeout)
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code < 300:
                return
            if attempt == self.retries:
                raise LetheError(answer.status_code if answer else 503, {"code": "store_refused_part"})
            self._wait(attempt, None)

    def begin_upload(self, body: dict[str, Any]) -> UploadView:
        """createUpload: a file row and its upload session (`name`, `size_bytes`, `mime_type`, ...)."""
        return self._as(UploadView, "POST", "/uploads", json=body)

    def get_upload(self, file_id: str) -> UploadView:
        """getUpload: the session and the parts the server has."""
        return self._as(UploadView, "GET", f"/uploads/{file_id}")

    def put_part(self, file_id: str, number: int, data: bytes) -> None:
        """putUploadPart: part `number` (1-based), exactly the part size (the last: the rest); retried."""
        self._send(
            "PUT",
            f"/uploads/{file_id}/parts/{number}",
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )

    def part_url(self, file_id: str, number: int) -> PartUrl:
        """createUploadPartUrl: a fresh presigned URL for part `number` of a direct upload."""
        return self._as(PartUrl, "POST", f"/uploads/{file_id}/parts/{number}/url")

    def complete_upload(self, file_id: str) -> File:
        """completeUpload: assemble the parts; the file as it then stands (its scan follows)."""
        return self._as(File, "POST", f"/uploads/{file_id}/complete")

    def abort_upload(self, file_id: str) -> None:
        """abortUpload: the file fails and its parts are purged."""
        self._send("DELETE", f"/uploads/{file_id}")

    def _tus(self, stream: BinaryIO, size: int, name: str, purpose: str, mime_type: str) -> File:
        from tusclient import client as tus_client

        tus = tus_client.TusClient(self.base_url + "/api/v1/tus", headers={"Authorization": f"Bearer {self.token}"})
        uploader = tus.uploader(
            file_stream=stream,
            chunk_size=8 * CHUNK,
            metadata={"filename": name, "filetype": mime_type, "purpose": purpose},
            retries=self.retries,
            retry_delay=max(int(self.backoff_s), 1),
            upload_checksum=True,
        )
        uploader.upload()
        return self.file(str(uploader.url).rstrip("/").rsplit("/", 1)[-1])

    def terminate_tus_upload(self, file_id: str) -> None:
        """tusTerminateUpload: end a tus upload (its file fails, its bytes are purged)."""
        self._send("DELETE", f"/tus/{file_id}", headers={"Tus-Resumable": "1.0.0"})

    def wait_ready(self, file_id: str, timeout_s: float = 60.0, poll_s: float = 0.2) -> File:
        """The file once its scan settled it (ready, or blocked or failed: check `File.ready`). Prefer the
        `file.ready` webhook in an application; this is for scripts and tests."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.file(file_id)
            if found.upload_state == "failed" or found.scan_status not in ("pending",):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"file {file_id} still pending after {timeout_s} s")
            time.sleep(poll_s)

    # -- files ------------------------------------------------------------------------------------------------

    def file(self, file_id: str) -> File:
        """getFile."""
        return self._as(File, "GET", f"/files/{file_id}")

    def files(
        self, *, purpose: str | None = None, state: str | None = None, uploader: str | None = None, page_size: int = 100
    ) -> Iterator[File]:
        """listFiles, every page: the newest first."""
        params: dict[str, Any] = {"limit": page_size}
        params.update({k: v for k, v in (("purpose", purpose), ("state", state), ("uploader", uploader)) if v})
        while True:
            page = self._json("GET", "/files", params=params)
            for one in page["files"]:
                yield load(File, one)
            if not page.get("next"):
                return
            params["after"] = page["next"]

    def delete(self, file_id: str) -> None:
        """deleteFile: marked at once, its objects purged within the installation's delay."""
        self._send("DELETE", f"/files/{file_id}")

    def delete_many(self, file_ids: list[str]) -> list[BatchDeleteResult]:
        """batchDeleteFiles: each file's own answer (204 deleted, or deleteFile's refusal for it)."""
        found = self._json("POST", "/files/batch-delete", json={"ids": list(file_ids)})
        return [load(BatchDeleteResult, one) for one in found["results"]]

    def restore(self, file_id: str) -> File:
        """restoreFile: undo a deletion while its objects are still there."""
        return self._as(File, "POST", f"/files/{file_id}/restore")

    def download(
        self, file_id: str, range: tuple[int, int | None] | None = None, *, etag: str | None = None
    ) -> Download:
        """getFileContent, streamed: the whole file, or bytes `range=(first, last)` (last None: to the end).
        With `etag` (a Download's), the server answers only that version (If-Match): a file replaced since
        raises LetheError 412 instead of mixing two versions' bytes."""
        return self._download(f"/files/{file_id}/content", range, etag)

    def download_variant(self, file_id: str, name: str, range: tuple[int, int | None] | None = None) -> Download:
        """getFileVariant: an image's variant (thumb-small, thumb-large, preview, poster)."""
        return self._download(f"/files/{file_id}/variants/{name}", range, None)

    def download_to(self, file_id: str, path: str | os.PathLike[str]) -> Path:
        """Download a file into `path`, going on from the bytes already there after a cut (Range with the ETag
        of the first answer, so a resumed download never joins two versions)."""
        target = Path(path)
        etag: str | None = None  # of this call's first answer: only its bytes are ever joined
        for attempt in range(self.retries + 1):
            have = target.stat().st_size if etag is not None and target.exists() else 0
            try:
                with self.download(file_id, (have, None) if have else None, etag=etag) as got:
                    etag = etag or got.etag
                    with open(target, "ab" if have else "wb") as out:
                        for chunk in got:
                            out.write(chunk)
                return target
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                self._wait(attempt, None)
        return target

    def _download(self, path: str, range: tuple[int, int | None] | None, etag: str | None) -> Download:
        headers = {}
        if range is not None:
            first, last = range
            headers["Range"] = f"bytes={first}-{'' if last is None else last}"
        if etag is not None:
            headers["If-Match"] = etag
        response = self._send("GET", path, stream=True, headers=headers, follow_redirects=False)
        got = response.headers.get("ETag")
        plain: httpx.Client | None = None
        if response.is_redirect:  # file.s3.download redirect: Lethe checked the token and If-Match; the store serves
            response.close()
            plain = httpx.Client(timeout=self.http.timeout)
            ranged = {"Range": headers["Range"]} if "Range" in headers else {}
            response = plain.send(plain.build_request("GET", response.headers["Location"], headers=ranged), stream=True)
            if response.status_code >= 400:
                response.read()
                plain.close()
                raise _problem(response)
        if etag is not None and got is not None and got != etag:
            response.close()
            raise LetheError(412, {"code": "precondition_failed", "detail": "The file changed since its ETag."})
        if range is not None and response.status_code != 206:
            response.close()
            raise LetheError(response.status_code, {"code": "range_ignored", "detail": "No partial answer."})
        return Download(response, got, response.headers.get("Content-Range"), plain)

    def link(
        self, file_id: str, *, disposition: str = "attachment", ttl: str | None = None, variant: str | None = None
    ) -> Link:
        """createFileLink: a URL anyone holding it may read until it ends (an <img>, a download)."""
        body: dict[str, Any] = {"disposition": disposition}
        if ttl is not None:
            body["ttl"] = ttl
        if variant is not None:
            body["variant"] = variant
        return self._as(Link, "POST", f"/files/{file_id}/links", json=body)

    def download_link(self, url: str) -> bytes:
        """getLinkContent: what a link serves, with no token (the link is its credential)."""
        with httpx.Client(timeout=self.http.timeout, follow_redirects=True) as plain:
            answer = plain.get(url)
        if answer.status_code >= 400:
            raise _problem(answer)
        return answer.content

    def explain(self, file_id: str) -> Explanation:
        """explainFile (manage): why a file's bytes stay or go."""
        return self._as(Explanation, "GET", f"/files/{file_id}/explain")

    # -- attachments, drafts, events --------------------------------------------------------------------------

    def attach(self, message_id: str, file_ids: list[str]) -> Message:
        """putMessage: the message's attachments are exactly these files (attached files are kept)."""
        return self._as(Message, "PUT", f"/messages/{message_id}", json={"file_ids": list(file_ids)})

    def delete_message(self, message_id: str) -> None:
        """deleteMessage: its files lose this attachment (and go when nothing else keeps them)."""
        self._send("DELETE", f"/messages/{message_id}")

    def drafts(self) -> list[Draft]:
        """listDrafts: the caller's drafts."""
        return [load(Draft, one) for one in self._json("GET", "/drafts")["drafts"]]

    def put_draft(self, key: str, text: str = "", file_ids: list[str] | None = None) -> Draft:
        """putDraft: a draft holds its files while it lasts."""
        return self._as(Draft, "PUT", f"/drafts/{key}", json={"text": text, "file_ids": list(file_ids or [])})

    def delete_draft(self, key: str) -> None:
        """deleteDraft."""
        self._send("DELETE", f"/drafts/{key}")

    def events(self, after: int = 0, page_size: int = 100) -> Iterator[Event]:
        """listEvents from `after` on, every page (keep the last id to go on later)."""
        while True:
            page = self._json("GET", "/events", params={"after": after, "limit": page_size})
            for one in page["events"]:
                yield load(Event, one)
            if not page["events"] or page["next_after"] == after:
                return
            after = page["next_after"]

    # -- avatars and the logo ---------------------------------------------------------------------------------

    def avatar(self, principal_id: str) -> str:
        """getAvatar: the file id in a principal's avatar slot."""
        return str(self._json("GET", f"/principals/{principal_id}/avatar")["file_id"])

    def set_avatar(self, principal_id: str, file_id: str) -> str:
        """putAvatar: the file (an image of the caller's) in the slot; the one before goes."""
        return str(self._json("PUT", f"/principals/{principal_id}/avatar", json={"file_id": file_id})["file_id"])

    def remove_avatar(self, principal_id: str) -> None:
        """deleteAvatar."""
        self._send("DELETE", f"/principals/{principal_id}/avatar")

    def logo(self) -> str:
        """getLogo: the file id in the installation's logo slot."""
        return str(self._json("GET", "/branding/logo")["file_id"])

    def set_logo(self, file_id: str) -> str:
        """putLogo (manage)."""
        return str(self._json("PUT", "/branding/logo", json={"file_id": file_id})["file_id"])

    def remove_logo(self) -> None:
        """deleteLogo (manage)."""
        self._send("DELETE", "/branding/logo")

    # -- manage: receipts, erasures, holds, quotas ------------------------------------------------------------

    def receipt(self, file_id: str) -> Receipt:
        """getReceipt (manage): the proof a file's objects are gone."""
        return self._as(Receipt, "GET", f"/receipts/{file_id}")

    def erase(self, subject_id: str) -> Erasure:
        """createErasure (manage): remove everything of a person, proven by a read."""
        return self._as(Erasure, "POST", "/erasures", json={"subject_id": subject_id})

    def erasure(self, erasure_id: str) -> Erasure:
        """getErasure (manage)."""
        return self._as(Erasure, "GET", f"/erasures/{erasure_id}")

    def place_hold(self, case_ref: str, *, subject_id: str | None = None, file_id: str | None = None) -> Hold:
        """placeHold (manage): keep a person's files, or one file, until it is released."""
        body: dict[str, Any] = {"case_ref": case_ref}
        if subject_id is not None:
            body["subject_id"] = subject_id
        if file_id is not None:
            body["file_id"] = file_id
        return self._as(Hold, "POST", "/holds", json=body)

    def hold(self, hold_id: str) -> Hold:
        """getHold (manage)."""
        return self._as(Hold, "GET", f"/holds/{hold_id}")

    def holds(self, page_size: int = 100) -> Iterator[Hold]:
        """listHolds (manage), every page."""
        params: dict[str, Any] = {"limit": page_size}
        while True:
            page = self._json("GET", "/holds", params=params)
            for one in page["holds"]:
                yield load(Hold, one)
            if not page.get("next_after"):
                return
            params["after"] = page["next_after"]

    def release_hold(self, hold_id: str) -> None:
        """releaseHold (manage): what it deferred goes now."""
        self._send("DELETE", f"/holds/{hold_id}")

    def set_quota(self, principal_id: str, **limits: Any) -> Usage:
        """setQuota (manage): `max_bytes`, `max_files`, `purposes`."""
        return self._as(Usage, "PUT", f"/principals/{principal_id}/quota", json=limits)

    def usage(self, principal_id: str) -> Usage:
        """getUsage: a principal's bytes and files against its quota."""
        return self._as(Usage, "GET", f"/principals/{principal_id}/usage")


def _problem(response: httpx.Response) -> LetheError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    body.setdefault("code", "http_" + str(response.status_code))
    return LetheError(response.status_code, body)


class _opened:
    """A source as a seekable binary stream and its size (a stream that cannot seek is spooled first)."""

    def __init__(self, source: Source):
        self.source = source
        self.owned: IO[bytes] | None = None

    def __enter__(self) -> tuple[BinaryIO, int]:
        source = self.source
        if isinstance(source, bytes):
            stream: BinaryIO = io.BytesIO(source)
        elif isinstance(source, (str, os.PathLike)):
            stream = open(source, "rb")
            self.owned = stream
        elif source.seekable():
            stream = source
        else:
            spool = tempfile.SpooledTemporaryFile(max_size=64 * CHUNK)
            shutil.copyfileobj(source, spool, CHUNK)
            self.owned = spool
            stream = spool  # type: ignore[assignment]
        stream.seek(0, io.SEEK_END)
        size = stream.tell()
        stream.seek(0)
        return stream, size

    def __exit__(self, *exc: object) -> None:
        if self.owned is not None:
            self.owned.close()


def _name_of(source: Source) -> str:
    """The name a file is uploaded under when none is given: its path's last part, else `upload.bin`."""
    if isinstance(source, (str, os.PathLike)):
        return Path(source).name
    named = getattr(source, "name", None)
    return Path(named).name if isinstance(named, str) and named else "upload.bin"


def _sha256(stream: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
    stream.seek(0)
    return digest.hexdigest()
