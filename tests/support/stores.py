"""The suite's object stores: S3 buckets on moto or SeaweedFS, and what a test may see of them that the service never
looks at (versions, delete markers, multipart uploads)."""

from __future__ import annotations

import uuid
from typing import Any

from app.domain.keys import FILES_PREFIX, original_key
from tests.support.servers import serve_in_thread


def make_s3_store(endpoint: str, bucket: str | None = None, versioned: bool = False, server: str = "moto"):
    from minio.commonconfig import ENABLED
    from minio.versioningconfig import VersioningConfig

    from app.storage.s3 import S3Store

    store = S3Store(
        endpoint,
        bucket or f"lethe-{uuid.uuid4().hex[:12]}",
        "testing",
        "testing",
        region="us-east-1",
        secure=False,
        create_bucket=True,
    )
    store.test_server = server  # type: ignore[attr-defined]  # which server's part-size minimum applies
    if versioned:
        store.client.set_bucket_versioning(store.bucket, VersioningConfig(ENABLED))
    return store


# Emptied buckets a worker process made for its tests, by server endpoint and versioning: SeaweedFS gives a new
# bucket its volumes at its first write (0.2 s), once per bucket, so the suite's tests take turns with a few.
_SPARE: dict[tuple[str, bool], list[str]] = {}


def bucket_for_test(endpoint: str, versioned: bool, server: str):
    """An S3 store on an empty bucket of the server's: an emptied one a finished test gave back, or a new one.
    Each test gets a store object of its own (what a test patches on it ends with the test)."""
    spare = _SPARE.get((endpoint, versioned))
    return make_s3_store(endpoint, bucket=spare.pop() if spare else None, versioned=versioned, server=server)


def give_back(s3_store, versioned: bool) -> None:
    """Remove every version, delete marker and multipart upload from a test's bucket and keep it for the next
    test; a bucket that cannot be emptied is left alone (the next test makes a new one)."""
    from minio.deleteobjects import DeleteObject

    client, bucket = s3_store.client, s3_store.bucket
    try:
        for upload in client._list_multipart_uploads(bucket).uploads:
            client._abort_multipart_upload(bucket, upload.object_name, upload.upload_id)
        doomed = [DeleteObject(item.object_name, item.version_id) for item in all_versions(s3_store)]
        if doomed:
            errors = list(client.remove_objects(bucket, doomed))
            if errors or all_versions(s3_store):
                return
    except Exception:  # a fault a test left in place (a stopped server, a proxy): a new bucket next time
        return
    _SPARE.setdefault((s3_store.endpoint, versioned), []).append(bucket)


def all_versions(s3_store) -> list[Any]:
    """Every version and delete marker in a test bucket (a test may list; the service never does, K2)."""
    return list(s3_store.client.list_objects(s3_store.bucket, recursive=True, include_version=True))


def versions_of(raw_store, keys) -> list[Any]:
    """What a store still holds of these keys: on S3 every version and delete marker, on fs the object."""
    wanted = set(keys)
    if raw_store.driver == "fs":
        return [key for key in sorted(wanted) if raw_store.head(key) is not None]
    return [(item.object_name, item.version_id) for item in all_versions(raw_store) if item.object_name in wanted]


def uploads_left(raw_store, key: str) -> list[str]:
    """The ids of the multipart uploads the server still lists under a key; none on fs (a test may list; the
    service never does, K2)."""
    if raw_store.driver == "fs":
        return []
    return [
        upload.upload_id for upload in raw_store.client._list_multipart_uploads(raw_store.bucket, prefix=key).uploads
    ]


def assert_nothing_hidden(s3_store) -> None:
    """On a bucket that keeps versions, every key either still has a current object or has no version and no
    delete marker left: a delete never leaves readable bytes behind a marker (D16)."""
    by_key: dict[str, list[Any]] = {}
    for item in all_versions(s3_store):
        by_key.setdefault(item.object_name, []).append(item)
    hidden = sorted(
        key
        for key, items in by_key.items()
        if not any(item.is_latest == "true" and not item.is_delete_marker for item in items)
    )
    assert not hidden, f"{len(hidden)} deleted key(s) keep versions or delete markers in a versioned bucket"


class MotoS3:
    """moto's S3 on 127.0.0.1 and a port the system hands out, served as moto's own ThreadedMotoServer serves it
    but without its dispatcher: that one finds the service of each request among every AWS service moto has (a
    listing of moto's package folder and a lock per request, about a third of a request's CPU here) and logs each
    request. The suite talks S3 alone, signed, to moto's same S3 backend."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class Quiet(MotoRequestHandler):
            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass

        self.server = make_server("127.0.0.1", 0, create_backend_app("s3"), threaded=True, request_handler=Quiet)
        self.thread = serve_in_thread(self.server, "moto-s3")
        self.endpoint = f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join()


def originals_held(raw_store, ids) -> set[Any]:
    """Those of the files `ids` whose original the store still holds, read by one listing of the files' prefix
    through the driver's own `list_prefix` (current objects only), not a HEAD per file."""
    listed = {item.key for item in raw_store.list_prefix(FILES_PREFIX)}
    return {file_id for file_id in ids if original_key(file_id) in listed}
