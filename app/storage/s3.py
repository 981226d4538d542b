# The S3 driver deletes data. Deletes are idempotent (S3 answers a missing key as deleted); delete_many
# sends batches of at most 1,000 keys and drains the lazy error iterator of remove_objects, or nothing would
# be deleted at all; aborting an unknown multipart upload is success. Error messages carry the S3 error code
# only: minio's own messages contain the object key, which must never reach a log (D15).
"""S3 ObjectStore through the minio client."""

from __future__ import annotations

import io
from typing import BinaryIO, Iterable, Iterator, Sequence

import urllib3
from minio import Minio
from minio.datatypes import Part
from minio.deleteobjects import DeleteObject
from minio.error import MinioException, S3Error

from app.domain.keys import KeyError_, validate_key
from app.errors import InvalidKey, NotFound, StorageError
from app.storage.base import ObjectInfo, UploadedPart

DELETE_BATCH = 1000  # the S3 DeleteObjects limit
CHUNK = 1024 * 1024
_MISSING = {"NoSuchKey", "NoSuchObject", "NotFound"}


def _key(key: str) -> str:
    try:
        return validate_key(key)
    except KeyError_ as exc:
        raise InvalidKey(str(exc)) from None


def _fail(operation: str, exc: Exception) -> StorageError:
    code = exc.code if isinstance(exc, S3Error) else type(exc).__name__
    return StorageError(f"s3 {operation} failed: {code}")


class S3Store:
    """ObjectStore on one S3 bucket.

    Args:
        endpoint: host:port without scheme.
        bucket: the bucket that holds every object.
        access_key, secret_key, region, secure: as for minio.Minio.
        create_bucket: create the bucket when missing (development and tests).
        pool_size: HTTP connections kept open.
    """

    driver = "s3"

    def __init__(self, endpoint: str, bucket: str, access_key: str, secret_key: str, region: str = "",
                 secure: bool = True, create_bucket: bool = False, pool_size: int = 16):
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=5, read=60),
            maxsize=pool_size,
            retries=urllib3.Retry(total=3, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
        )
        self.client = Minio(endpoint, access_key=access_key or None, secret_key=secret_key or None,
                            region=region or None, secure=secure, http_client=http)
        self.bucket = bucket
        self._create_bucket = create_bucket
        if create_bucket:
            self.ensure_bucket()

    def ensure_bucket(self) -> None:
        try:
            if not self.client.bucket_exists(self.bucket):
                self.client.make_bucket(self.bucket)
        except S3Error as exc:
            if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise _fail("make_bucket", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("make_bucket", exc) from None

    def put(self, key: str, data: BinaryIO | bytes, length: int, content_type: str = "application/octet-stream") -> None:
        stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
        try:
            self.client.put_object(self.bucket, _key(key), stream, length, content_type=content_type,
                                   part_size=16 * 1024 * 1024 if length < 0 else 0)
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise _fail("put", exc) from None

    def open(self, key: str) -> Iterator[bytes]:
        try:
            response = self.client.get_object(self.bucket, _key(key))
        except S3Error as exc:
            if exc.code in _MISSING:
                raise NotFound("object not found") from None
            raise _fail("get", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("get", exc) from None

        def chunks() -> Iterator[bytes]:
            try:
                yield from response.stream(CHUNK)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise _fail("get", exc) from None
            finally:
                response.close()
                response.release_conn()

        return chunks()

    def get(self, key: str) -> bytes:
        return b"".join(self.open(key))

    def head(self, key: str) -> ObjectInfo | None:
        try:
            stat = self.client.stat_object(self.bucket, _key(key))
        except S3Error as exc:
            if exc.code in _MISSING:
                return None
            raise _fail("head", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("head", exc) from None
        return ObjectInfo(size_bytes=int(stat.size or 0))

    def delete(self, key: str) -> None:
        try:
            self.client.remove_object(self.bucket, _key(key))
        except S3Error as exc:
            if exc.code in _MISSING:
                return
            raise _fail("delete", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("delete", exc) from None

    def delete_many(self, keys: Iterable[str]) -> None:
        batch: list[str] = []
        for key in keys:
            batch.append(_key(key))
            if len(batch) == DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: list[str]) -> None:
        try:
            # remove_objects is lazy: nothing is sent until its error iterator is consumed.
            for error in self.client.remove_objects(self.bucket, [DeleteObject(key) for key in keys]):
                if error.code not in _MISSING:
                    raise StorageError(f"s3 delete_many failed: {error.code}")
        except S3Error as exc:
            raise _fail("delete_many", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("delete_many", exc) from None

    # -- multipart on the original's key (D4). minio exposes these calls only as methods with a leading
    # underscore; they are stable across 7.x and are what its own put_object uses (docs/decisions.md).

    def begin_upload(self, file_id: str, key: str, content_type: str) -> str | None:
        try:
            return self.client._create_multipart_upload(self.bucket, _key(key), {"Content-Type": content_type})
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("create_multipart_upload", exc) from None

    def put_part(self, file_id: str, key: str, upload_id: str | None, part_number: int, data: bytes) -> UploadedPart:
        try:
            etag = self.client._upload_part(self.bucket, _key(key), data, None, upload_id, part_number)
        except S3Error as exc:
            if exc.code == "NoSuchUpload":
                raise NotFound("upload not found") from None
            raise _fail("upload_part", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("upload_part", exc) from None
        return UploadedPart(part_number=part_number, etag=etag)

    def complete_upload(self, file_id: str, key: str, upload_id: str | None,
                        parts: Sequence[UploadedPart]) -> ObjectInfo:
        ordered = [Part(part.part_number, part.etag) for part in sorted(parts, key=lambda p: p.part_number)]
        try:
            self.client._complete_multipart_upload(self.bucket, _key(key), upload_id, ordered)
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("complete_multipart_upload", exc) from None
        info = self.head(key)
        if info is None:
            raise StorageError("s3 complete_multipart_upload left no object")
        return info

    def abort_upload(self, file_id: str, key: str, upload_id: str | None, part_count: int) -> None:
        if not upload_id:
            return
        try:
            self.client._abort_multipart_upload(self.bucket, _key(key), upload_id)
        except S3Error as exc:
            if exc.code in ("NoSuchUpload", *_MISSING):
                return  # unknown or already finished: nothing left to abort
            raise _fail("abort_multipart_upload", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("abort_multipart_upload", exc) from None

    def check(self) -> None:
        try:
            exists = self.client.bucket_exists(self.bucket)
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _fail("bucket_exists", exc) from None
        if not exists:
            raise StorageError("s3 bucket does not exist")

    def sweep_tmp(self, older_than, dry_run: bool = False) -> int:
        return 0  # S3 puts are atomic on the server; there is no temporary area of ours (D8 e).
