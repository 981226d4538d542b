# The S3 driver deletes data. Deletes are idempotent (S3 answers a missing key as deleted); delete_many
# sends batches of at most 1,000 keys (DeleteObjects, read per key); aborting an unknown multipart upload is success. On a bucket that keeps versions
# (versioning enabled or suspended, or not known) a delete lists the versions of that exact key only, never
# the key space (K2), and deletes every version and delete marker by id (D16). A refusal for one key is
# returned as a DeleteFailure so the purge isolates its file (D7); only a store-wide failure raises. Error
# messages carry the S3 error code only: minio's own messages contain the object key, which must never
# reach a log (D15). A store that throttles (SlowDown, 503, 429) is backed off from, with jittered waits and a
# delete batch that shrinks while it throttles and grows back after (Backoff), never failing a file for it.
"""S3 ObjectStore through the minio client."""

from __future__ import annotations

import io
import random
import re
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import BinaryIO, TypeVar

import urllib3
from minio import Minio
from minio.datatypes import Part
from minio.deleteobjects import DeleteObject
from minio.error import MinioException, S3Error
from minio.helpers import md5sum_hash

from app.domain.keys import KeySchemaError, validate_key
from app.errors import InvalidKey, NotFound, ObjectFailed, StorageError, Throttled
from app.storage.base import (
    OBJECT_LOCKED,
    DeleteFailure,
    ListedObject,
    ListedPart,
    ListedUpload,
    MultipartRef,
    ObjectInfo,
    UploadedPart,
)

DELETE_BATCH = 1000  # the S3 DeleteObjects limit
T = TypeVar("T")
CHUNK = 1024 * 1024
VERSIONING_REFRESH_S = 60.0  # a bucket can turn versioning on at any time: read it again this often
LIST_THREADS = 8  # concurrent ListObjectVersions calls of one delete_many on a versioned bucket
_MISSING = {"NoSuchKey", "NoSuchObject", "NotFound"}
# Codes that say the whole store is unwell (or misconfigured), not one object: the step stops (D8 d).
_STORE_WIDE = {
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "NoSuchBucket",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "RequestTimeTooSkewed",
    "AuthorizationHeaderMalformed",
}
_TRANSPORT = (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError)
# Answers that ask for fewer requests (AWS, Ceph, MinIO, GCS's XML API, SeaweedFS name them so).
_THROTTLING = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
_THROTTLING_STATUS = {429, 503}


def _count_nothing(operation: str) -> None:
    """No one counts throttled calls (the roles count them: app/entry/wiring.py sets `count_throttled`)."""


count_throttled: Callable[[str], None] = _count_nothing  # called with the operation of each throttled call


_MD5_HEX = re.compile(r"[0-9a-f]{32}")


def _key(key: str) -> str:
    try:
        return validate_key(key)
    except KeySchemaError as exc:
        raise InvalidKey(str(exc)) from None


def _store_wide(code: str | None, status: int | None = None) -> bool:
    return code in _STORE_WIDE or (status is not None and status >= 500)


def _throttling(exc: Exception) -> bool:
    """Whether a minio or transport error is the store asking for fewer requests: a throttling code or status,
    or urllib3's retries of a 503 or a 429 run out."""
    if isinstance(exc, S3Error):
        return exc.code in _THROTTLING or getattr(exc.response, "status", None) in _THROTTLING_STATUS
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(exc.reason, urllib3.exceptions.ResponseError):
        return any(f"too many {status} error" in str(exc.reason) for status in _THROTTLING_STATUS)
    return False


def _error(operation: str, exc: Exception) -> StorageError:
    """The one mapping of a minio or transport error: the S3 code only, never minio's message (it quotes
    the key). Throttling is Throttled; a refusal of one object is ObjectFailed; anything else is store-wide."""
    if _throttling(exc):
        count_throttled(operation)
        return Throttled(f"s3 {operation} throttled: {getattr(exc, 'code', None) or 'status'}")
    if isinstance(exc, S3Error):
        status = getattr(exc.response, "status", None)
        if _store_wide(exc.code, status):
            return StorageError(f"s3 {operation} failed: {exc.code}")
        return ObjectFailed(f"s3 {operation} refused: {exc.code}", store_code=exc.code or "")
    return StorageError(f"s3 {operation} failed: {type(exc).__name__}")


@contextmanager
def _mapped(operation: str, missing: type[Exception] | None = None, also_missing: Iterable[str] = ()) -> Iterator[None]:
    """Run minio calls with their errors mapped; with `missing`, a missing object raises that instead."""
    try:
        yield
    except S3Error as exc:
        if missing is not None and (exc.code in _MISSING or (exc.code or "") in also_missing):
            raise missing("object not found") from None
        raise _error(operation, exc) from None
    except _TRANSPORT as exc:
        raise _error(operation, exc) from None


class Breaker:
    """Holds calls back for `cooldown` seconds after a store-wide failure (D13: an outage answers fast).

    A stalled endpoint costs every call the whole timeout, three times over: without this, a worker's
    threads would sit on a dead store while the cleanup (the backlog gauge) and retries wait behind them.
    Only transport failures open it (refused, reset, timed out), and only `threshold` of them in a row: an
    S3 error answer means the endpoint is there, and one reset connection under load is not an outage. After the cooldown the next call goes through and either closes the breaker or opens it again;
    a readiness check that reaches the bucket closes it at once.
    """

    def __init__(self, cooldown: float = 5.0, threshold: int = 3, now: Callable[[], float] = time.monotonic):
        self.cooldown = cooldown
        self.threshold = threshold
        self._now = now
        self._open_until = 0.0
        self._failures = 0  # transport failures in a row, with no success between them

    def before(self, operation: str) -> None:
        if self._now() < self._open_until:
            raise StorageError(f"s3 {operation} held back: the store failed store-wide moments ago")

    def failed(self) -> None:
        self._failures += 1
        if self._failures >= self.threshold:
            self._open_until = self._now() + self.cooldown

    def succeeded(self) -> None:
        self._failures = 0

    def close(self) -> None:
        self._failures = 0
        self._open_until = 0.0


class Backoff:
    """Bounded, jittered retries of a throttled call, and the size of delete batches, adapted to the store.

    A throttled attempt waits a random time up to `base` doubled per attempt (at most `cap`: "full jitter", so
    that the workers' retries spread out) and halves the batch; `attempts` throttled answers in a row end the
    call with Throttled (the purge is retried later; no file fails). Each batch the store takes grows the next by a
    quarter, back to DELETE_BATCH: additive growth, multiplicative decrease, as TCP shares a link.
    """

    def __init__(
        self,
        attempts: int = 10,
        base: float = 0.05,
        cap: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ):
        self.attempts, self.base, self.cap = attempts, base, cap
        self._sleep, self._jitter = sleep, jitter
        self._lock = threading.Lock()
        self.batch = DELETE_BATCH

    def wait(self, attempt: int) -> None:
        """The pause after throttled attempt `attempt` (1, 2, ...)."""
        self._sleep(self._jitter() * min(self.cap, self.base * 2 ** (attempt - 1)))

    def throttled(self) -> None:
        """The store throttled a batch: the next ones are half as large."""
        with self._lock:
            self.batch = max(1, self.batch // 2)

    def took(self) -> None:
        """The store took a batch: the next ones grow by a quarter, up to DELETE_BATCH."""
        with self._lock:
            self.batch = min(DELETE_BATCH, self.batch + max(1, self.batch // 4))

    def call(self, fn: Callable[[], T]) -> T:
        """`fn`, retried while the store throttles it (an idempotent call only)."""
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except Throttled:
                if attempt == self.attempts:
                    raise
                self.wait(attempt)
        raise AssertionError("unreachable")


def _upload_id(ref: MultipartRef) -> str:
    if not ref.upload_id:
        raise StorageError("s3 multipart reference without an upload id")
    return ref.upload_id


class _Absent(Exception):
    """A missing object, inside the driver (delete and abort treat it as success)."""


@dataclass(frozen=True)
class BucketFacts:
    """What the driver read of its bucket: versioning `enabled`, `suspended`, `off` or `unknown`; object
    lock `enabled`, `off` or `unknown`."""

    versioning: str
    object_lock: str


def _public(public_endpoint: str, secure: bool) -> tuple[str, bool]:
    """The host:port and scheme presigned URLs name: `file.s3.public_endpoint`, with or without a scheme."""
    if "://" in public_endpoint:
        scheme, _, rest = public_endpoint.partition("://")
        return rest.rstrip("/"), scheme.lower() == "https"
    return public_endpoint.rstrip("/"), secure


class S3Store:
    """ObjectStore on one S3 bucket.

    Args:
        endpoint: host:port without scheme.
        bucket: the bucket that holds every object.
        access_key, secret_key, region, secure: as for minio.Minio.
        create_bucket: create the bucket when missing (development and tests).
        pool_size: HTTP connections kept open.
        timeout: the longest silence of the endpoint within one request (`file.s3.timeout`); a request is
            tried 3 times, so a stalled endpoint fails a call within about 3 times this.
    """

    driver = "s3"
    supports_direct = True  # presigned part URLs

    def __init__(
        self,
        endpoint: str,
        bucket: str,
        access_key: str,
        secret_key: str,
        region: str = "",
        secure: bool = True,
        create_bucket: bool = False,
        pool_size: int = 16,
        timeout: float = 15.0,
        public_endpoint: str = "",
    ):
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=min(3.0, timeout), read=timeout),
            maxsize=pool_size,
            retries=urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=[429, 500, 502, 503, 504]),
        )
        self.client = Minio(
            endpoint,
            access_key=access_key or None,
            secret_key=secret_key or None,
            region=region or None,
            secure=secure,
            http_client=http,
        )
        # Readiness asks through a client of its own that gives up within 2 s and never retries: a cut-off
        # endpoint answers /readyz 503 at once instead of after the data path's timeouts and retries.
        probe_http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=1, read=1), maxsize=2, retries=urllib3.Retry(total=0, redirect=False)
        )
        self._probe = Minio(
            endpoint,
            access_key=access_key or None,
            secret_key=secret_key or None,
            region=region or None,
            secure=secure,
            http_client=probe_http,
        )
        # Presigned URLs are signed for the address clients reach, which may not be the cluster's own; a region
        # is always named, so that signing never asks the store for its bucket's location.
        self._signer = self.client
        if public_endpoint:
            public_host, public_secure = _public(public_endpoint, secure)
            self._signer = Minio(
                public_host,
                access_key=access_key or None,
                secret_key=secret_key or None,
                region=region or "us-east-1",
                secure=public_secure,
                http_client=probe_http,
            )
        self.bucket = bucket
        self.endpoint = endpoint  # host:port, as configured (file.s3.endpoint)
        self._create_bucket = create_bucket
        self.breaker = Breaker()
        self.backoff = Backoff()
        self._lock = threading.Lock()
        self._versioning = "unknown"
        self._versioning_read_at = float("-inf")
        self._object_lock: str | None = None  # read once, at the first write: a lock cannot be taken off a bucket
        if create_bucket:
            self.ensure_bucket()

    @contextmanager
    def _mapped(
        self, operation: str, missing: type[Exception] | None = None, also_missing: Iterable[str] = ()
    ) -> Iterator[None]:
        """_mapped behind the breaker: an endpoint that cannot be reached or does not answer opens it (an
        S3 error answer does not: the endpoint is there), and an open breaker fails at once."""
        self.breaker.before(operation)
        with _mapped(operation, missing, also_missing):
            try:
                yield
                self.breaker.succeeded()
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                answered = isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(
                    exc.reason, urllib3.exceptions.ResponseError
                )  # 5xx answers, retried out
                if not answered:
                    self.breaker.failed()
                raise

    def ensure_bucket(self) -> None:
        try:
            if not self.client.bucket_exists(self.bucket):
                self.client.make_bucket(self.bucket)
        except S3Error as exc:
            if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise _error("make_bucket", exc) from None
        except _TRANSPORT as exc:
            raise _error("make_bucket", exc) from None

    # -- what the bucket keeps ------------------------------------------------------------------------------

    def inspect(self) -> BucketFacts:
        """Read the bucket's versioning and object lock configuration (D16). A permission refusal leaves a
        fact `unknown`; an unreachable store raises StorageError."""
        versioning = self._read_versioning()
        try:
            with self._mapped("get_object_lock_config"):
                self.client.get_object_lock_config(self.bucket)
            object_lock = "enabled"  # only a bucket made with object lock has a configuration to read
        except ObjectFailed as exc:
            object_lock = "off" if exc.store_code == "ObjectLockConfigurationNotFoundError" else "unknown"
        return BucketFacts(versioning=versioning, object_lock=object_lock)

    def describe(self) -> dict[str, str]:
        facts = self.inspect()
        return {"driver": self.driver, "versioning": facts.versioning, "object_lock": facts.object_lock}

    def _read_versioning(self) -> str:
        try:
            with self._mapped("get_bucket_versioning"):
                status = self.client.get_bucket_versioning(self.bucket).status
            versioning = (status or "Off").lower()
        except ObjectFailed:
            versioning = "unknown"  # no permission to read it: delete as if versions were kept
        with self._lock:
            self._versioning, self._versioning_read_at = versioning, time.monotonic()
        return versioning

    def keeps_versions(self) -> bool:
        """Whether a delete must remove versions by id: versioning enabled, suspended (versions written
        before the suspension stay) or unknown. Read again every VERSIONING_REFRESH_S."""
        with self._lock:
            fresh = time.monotonic() - self._versioning_read_at < VERSIONING_REFRESH_S
            versioning = self._versioning
        if not fresh:
            try:
                versioning = self._read_versioning()
            except StorageError:
                versioning = "unknown"
        return versioning != "off"

    # -- objects --------------------------------------------------------------------------------------------

    def _content_md5(self, data: bytes) -> dict[str, str]:
        """The Content-MD5 header a bucket with object lock asks of every write (over plain HTTP minio sends
        none), else nothing."""
        if self._object_lock is None:
            try:
                self._object_lock = self.inspect().object_lock
            except StorageError:
                return {"Content-MD5": md5sum_hash(data) or ""}  # not known yet: sending it is always accepted
        return {"Content-MD5": md5sum_hash(data) or ""} if self._object_lock != "off" else {}

    def put(
        self,
        key: str,
        data: BinaryIO | bytes | Iterable[bytes],
        length: int | None = None,
        content_type: str = "application/octet-stream",
    ) -> None:
        if isinstance(data, (bytes, bytearray, memoryview)):
            md5 = self._content_md5(bytes(data))
            if md5:
                with self._mapped("put"):
                    self.client._put_object(self.bucket, _key(key), bytes(data), {"Content-Type": content_type, **md5})
                return
        if isinstance(data, (bytes, bytearray, memoryview)):
            stream: BinaryIO = io.BytesIO(data)
            length = len(data)
        else:
            stream = data if hasattr(data, "read") else _ChunkReader(data)  # type: ignore[assignment]
            length = -1 if length is None else length
        with self._mapped("put"):
            self.client.put_object(
                self.bucket,
                _key(key),
                stream,
                length,
                content_type=content_type,
                part_size=16 * 1024 * 1024 if length < 0 else 0,
            )

    def put_md5(self, key: str, data: bytes) -> str | None:
        headers: dict[str, str | list[str] | tuple[str]] = {
            "Content-Type": "application/octet-stream",
            "Content-MD5": md5sum_hash(data) or "",
        }
        with self._mapped("put"):
            written = self.client._put_object(self.bucket, _key(key), data, headers)
        etag = (written.etag or "").strip('"').lower()
        return etag if _MD5_HEX.fullmatch(etag) else None

    def open(self, key: str, first: int = 0, length: int | None = None) -> Generator[bytes, None, None]:
        with self._mapped("get", missing=NotFound):
            response = self.client.get_object(self.bucket, _key(key), offset=first, length=length or 0)

        def chunks() -> Generator[bytes, None, None]:
            try:
                with self._mapped("get"):
                    yield from response.stream(CHUNK)
            finally:
                response.close()
                response.release_conn()

        return chunks()

    def get(self, key: str) -> bytes:
        return b"".join(self.open(key))

    def presign_get(self, key: str, expires_in: timedelta, content_type: str, disposition: str) -> str:
        # Signed locally for the address clients reach (file.s3.public_endpoint); the store answers with the
        # headers named here, so a browser sees the type Lethe decided and caches nothing.
        with self._mapped("presign_get"):
            return self._signer.get_presigned_url(
                "GET",
                self.bucket,
                _key(key),
                expires=expires_in,
                response_headers={
                    "response-content-type": content_type,
                    "response-content-disposition": disposition,
                    "response-cache-control": "private, no-store",
                },
            )

    def head(self, key: str) -> ObjectInfo | None:
        try:
            with self._mapped("head", missing=_Absent):
                stat = self.client.stat_object(self.bucket, _key(key))
        except _Absent:
            return None
        return ObjectInfo(size_bytes=int(stat.size or 0))

    def delete(self, key: str) -> None:
        failures = self.delete_many([key])
        if failures:
            raise ObjectFailed(f"s3 delete refused: {failures[0].code}", store_code=failures[0].code)

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        checked = [_key(key) for key in keys]  # every key is validated before anything is deleted
        if not checked:
            return []
        if self.keeps_versions():
            return self._delete_all_versions(checked)
        failures, marked = self._delete_batches([DeleteObject(key) for key in checked])
        if marked:
            # S3 answered with delete markers: versioning was turned on since it was last read. What the
            # plain delete hid is still there; delete every version of those keys (D16).
            with self._lock:
                self._versioning, self._versioning_read_at = "enabled", time.monotonic()
            failures += self._delete_all_versions(marked)
        return failures

    def _delete_batches(self, objects: list[DeleteObject]) -> tuple[list[DeleteFailure], list[str]]:
        """DeleteObjects calls of every object, in batches of the size the store takes now (Backoff): a
        throttled batch waits and is sent again, smaller; deleting is idempotent, so nothing is deleted twice in
        effect and nothing is skipped."""
        failures: list[DeleteFailure] = []
        marked: list[str] = []
        done, attempt = 0, 0
        while done < len(objects):
            batch = objects[done : done + self.backoff.batch]
            try:
                batch_failures, batch_marked = self._delete_batch(batch)
            except Throttled:
                self.backoff.throttled()
                attempt += 1
                if attempt >= self.backoff.attempts:
                    raise
                self.backoff.wait(attempt)
                continue
            self.backoff.took()
            attempt = 0
            failures += batch_failures
            marked += batch_marked
            done += len(batch)
        return failures, marked

    def _delete_batch(self, objects: list[DeleteObject]) -> tuple[list[DeleteFailure], list[str]]:
        """One DeleteObjects call (at most 1,000 objects). S3 answers per key: a store-wide code raises, a
        refusal of one key is returned for that key. Also returns the keys for which S3 wrote a delete
        marker instead of deleting (a bucket that keeps versions)."""
        failures = []
        with self._mapped("delete_many"):
            result = self.client._delete_objects(self.bucket, objects, quiet=False)
        for error in result.error_list:
            if error.code in _MISSING:
                continue
            if error.code in _THROTTLING:  # some keys throttled: the whole batch is sent again
                count_throttled("delete_many")
                raise Throttled(f"s3 delete_many throttled: {error.code}")
            if _store_wide(error.code):
                raise StorageError(f"s3 delete_many failed: {error.code}")
            locked = error.code == "AccessDenied" and "object lock" in (error.message or "").lower()
            failures.append(DeleteFailure(key=error.name or "", code=OBJECT_LOCKED if locked else error.code))
        marked = [deleted.name for deleted in result.object_list if deleted.delete_marker and not deleted.version_id]
        return failures, marked

    def _delete_all_versions(self, keys: list[str]) -> list[DeleteFailure]:
        """Every version and delete marker of each key. Keys are grouped by their directory (a file's own
        `f/<aa>/<bb>/<id>/`, which holds that file's objects only, K3), and each directory's versions are
        listed once, keeping only the exact names asked for (`orig-1` must not take `orig-10`): one request a
        file instead of one a key (a versioned purge ran at a third of a plain one on SeaweedFS)."""
        failures: list[DeleteFailure] = []
        objects: list[DeleteObject] = []
        groups: dict[str, set[str]] = {}
        for key in keys:
            groups.setdefault(key.rsplit("/", 1)[0] + "/" if "/" in key else key, set()).add(key)

        def listed(prefix: str) -> list[tuple[str, str]]:
            wanted = groups[prefix]
            with self._mapped("list_object_versions"):
                return [
                    (item.object_name, item.version_id)
                    for item in self.client.list_objects(
                        self.bucket, prefix=prefix, recursive=True, include_version=True
                    )
                    if item.object_name in wanted and item.version_id
                ]

        def versions_in(prefix: str) -> tuple[str, list[tuple[str, str]] | str]:
            try:
                return prefix, self.backoff.call(lambda: listed(prefix))
            except ObjectFailed as exc:
                return prefix, exc.store_code or "refused"

        with ThreadPoolExecutor(max_workers=min(LIST_THREADS, len(groups))) as pool:
            for prefix, found in pool.map(versions_in, groups):
                if isinstance(found, str):
                    failures += [DeleteFailure(key=key, code=found) for key in sorted(groups[prefix])]
                else:
                    objects.extend(DeleteObject(key, version_id) for key, version_id in found)
        failures += self._delete_batches(objects)[0]
        locked = sorted({failure.key for failure in failures if failure.code == OBJECT_LOCKED})
        if locked:
            # A version the bucket's object lock keeps stays until its retain-until date; a delete marker over
            # it at least takes the key out of every plain read and listing (its versions stay listed).
            failures += [
                failure
                for failure in self._delete_batches([DeleteObject(key) for key in locked])[0]
                if failure.code != OBJECT_LOCKED
            ]
        return failures

    # -- multipart on the original's key (D4). minio exposes these calls only as methods with a leading
    # underscore; they are stable across 7.x and are what its own put_object uses (docs/decisions.md).

    def begin_upload(self, file_id: str, key: str, content_type: str) -> MultipartRef:
        with self._mapped("create_multipart_upload"):
            upload_id = self.client._create_multipart_upload(self.bucket, _key(key), {"Content-Type": content_type})
        return MultipartRef(file_id=file_id, key=key, upload_id=upload_id)

    def put_part(self, ref: MultipartRef, part_number: int, data: bytes | Iterator[bytes]) -> UploadedPart:
        if not isinstance(data, bytes):
            data = b"".join(data)  # minio's UploadPart takes the part's bytes: one part is held, at most part_size
        md5 = self._content_md5(data)
        headers: dict[str, str | list[str] | tuple[str]] | None = dict(md5) if md5 else None
        with self._mapped("upload_part", missing=NotFound, also_missing=("NoSuchUpload",)):
            etag = self.client._upload_part(self.bucket, _key(ref.key), data, headers, _upload_id(ref), part_number)
        return UploadedPart(part_number=part_number, etag=etag)

    def part_keys(self, file_id: str, part_count: int) -> list[str]:
        return []  # parts belong to the multipart upload, which its abort removes

    def complete_upload(self, ref: MultipartRef, parts: Sequence[UploadedPart]) -> ObjectInfo:
        # The parts as the store holds them now, as the fs driver assembles its part files: a PUT of a part that
        # lost its race with this completion (it answered 409) may have replaced the part after its ETag was
        # recorded, and a sealed part written again never has the same ETag. What is assembled is measured after.
        # A part whose ETag the store does not list (it was written again) is taken as the store holds it now;
        # the others as given (a direct upload's come from this same listing).
        held: dict[int, list[str]] = {}
        for listed in self.list_parts(ref):
            held.setdefault(listed.part_number, []).append(listed.etag)
        ordered = [
            Part(
                part.part_number,
                part.etag if part.etag in held.get(part.part_number, [part.etag]) else held[part.part_number][-1],
            )
            for part in sorted(parts, key=lambda p: p.part_number)
        ]
        with self._mapped("complete_multipart_upload", missing=NotFound, also_missing=("NoSuchUpload",)):
            self.client._complete_multipart_upload(self.bucket, _key(ref.key), _upload_id(ref), ordered)
        info = self.head(ref.key)
        if info is None:
            raise StorageError("s3 complete_multipart_upload left no object")
        return info

    def abort_upload(self, ref: MultipartRef, part_count: int) -> None:
        if not ref.upload_id:
            return
        try:
            with self._mapped("abort_multipart_upload", missing=_Absent, also_missing=("NoSuchUpload",)):
                self.client._abort_multipart_upload(self.bucket, _key(ref.key), ref.upload_id)
        except _Absent:
            return  # unknown or already finished: nothing left to abort

    # -- direct uploads: presigned part URLs, and the store's own word on what it holds.

    def presign_part(self, ref: MultipartRef, part_number: int, expires_in: timedelta) -> str:
        # Signed locally with the configured region; the URL names the original's key (built from the file id
        # alone) and the upload id, and only its uploader is given it.
        with self._mapped("presign_upload_part"):
            return self._signer.get_presigned_url(
                "PUT",
                self.bucket,
                _key(ref.key),
                expires=expires_in,
                extra_query_params={"partNumber": str(part_number), "uploadId": _upload_id(ref)},
            )

    def list_parts(self, ref: MultipartRef) -> list[ListedPart]:
        parts: list[ListedPart] = []
        marker: str | None = None
        while True:
            with self._mapped("list_parts", missing=NotFound, also_missing=("NoSuchUpload",)):
                page = self.client._list_parts(
                    self.bucket, _key(ref.key), _upload_id(ref), max_parts=1000, part_number_marker=marker
                )
            parts += [ListedPart(part.part_number, part.size or 0, part.etag) for part in page.parts]
            if not page.is_truncated or not page.next_part_number_marker:
                return sorted(parts, key=lambda part: part.part_number)
            marker = page.next_part_number_marker

    def uploads_of(self, key: str) -> list[str]:
        return [listed.upload_id for listed in self._uploads(_key(key)) if listed.key == key]

    def list_uploads(self, prefix: str) -> Iterator[ListedUpload]:
        """ListMultipartUploads page by page (1,000 a page), in key order: only for the audit (K2)."""
        return self._uploads(prefix)

    def _uploads(self, prefix: str) -> Iterator[ListedUpload]:
        key_marker: str | None = None
        upload_marker: str | None = None
        while True:
            with self._mapped("list_multipart_uploads"):
                page = self.client._list_multipart_uploads(
                    self.bucket, prefix=prefix, max_uploads=1000, key_marker=key_marker, upload_id_marker=upload_marker
                )
            for upload in page.uploads:
                if upload.object_name and upload.upload_id:
                    yield ListedUpload(upload.object_name, upload.upload_id, upload.initiated_time)
            if not page.is_truncated or not (page.next_key_marker or page.next_upload_id_marker):
                return
            key_marker, upload_marker = page.next_key_marker, page.next_upload_id_marker

    def check(self) -> None:
        with _mapped("bucket_exists"):  # not behind the breaker: readiness asks the endpoint itself
            exists = self._probe.bucket_exists(self.bucket)
        if not exists:
            raise StorageError("s3 bucket does not exist")
        self.breaker.close()

    def remains(self, keys: Sequence[str]) -> list[str]:
        """A head per key; on a bucket that keeps versions, the versions of that exact key are listed too."""
        versioned = self.keeps_versions()
        found = []
        for key in keys:
            if self.head(key) is not None:
                found.append(key)
            elif versioned:
                with self._mapped("list_object_versions"):
                    if any(
                        item.object_name == key
                        for item in self.client.list_objects(
                            self.bucket, prefix=_key(key), recursive=True, include_version=True
                        )
                    ):
                        found.append(key)
        return found

    def list_prefix(self, prefix: str, after: str = "") -> Iterator[ListedObject]:
        """ListObjectsV2 page by page (1,000 keys a page), current objects only, in key order (from `after`)."""
        with self._mapped("list_objects"):
            for item in self.client.list_objects(self.bucket, prefix=prefix, recursive=True, start_after=after or None):
                if item.object_name and not item.is_dir and item.last_modified is not None:
                    yield ListedObject(key=item.object_name, modified_at=item.last_modified)


class _ChunkReader(io.RawIOBase):
    """Chunks as a file minio reads (a put of unknown length goes up in 16 MiB parts)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self._left:
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._left = bytes(chunk)
        if size < 0 or size >= len(self._left):
            out, self._left = self._left, b""
        else:
            out, self._left = self._left[:size], self._left[size:]
        return out
