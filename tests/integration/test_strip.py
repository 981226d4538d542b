"""An image's stored original without its location (image.strip_metadata), whichever way it came in, and every
path that serves it: download, attachment and inline links, redirects, variants; the original it replaced gone
from the store, every version of it."""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

import pytest
import requests

from app.domain.keys import original_key
from app.errors import StorageError
from tests.integration import test_direct_uploads as direct
from tests.integration.test_tus import create as tus_create
from tests.integration.test_tus import created_id
from tests.integration.test_tus import patch as tus_patch
from tests.support import images
from tests.support.lethe import ALEX
from tests.support.stores import versions_of
from tests.unit.test_image_metadata import EXIFTOOL, exiftool

KINDS = {"jpeg": "holiday.jpg", "png": "map.png", "webp": "pier.webp", "gif": "wave.gif"}


def link(lethe, file_id: str, disposition: str) -> str:
    made = lethe.call("POST", f"/api/v1/files/{file_id}/links", ALEX, json={"disposition": disposition})
    assert made.status_code == 201, made.json
    return urlsplit(made.json["url"]).path


def served_everywhere(lethe, file_id: str, kind: str) -> list[bytes]:
    """What a reader gets of the original, through every path that serves it (a scan just ran: no variant yet)."""
    download = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert download.status_code == 200
    attachment = lethe.client.get(link(lethe, file_id, "attachment"))
    inline = lethe.client.get(link(lethe, file_id, "inline"))
    # An inline link of a stripped image shows the image itself, at once: no wait for a preview, no attachment
    assert inline.status_code == 200 and inline.headers["Content-Disposition"] == "inline"
    assert inline.headers["Content-Type"] == f"image/{kind}"
    ranged = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": "bytes=0-"})
    return [download.data, attachment.data, inline.data, ranged.data]


def assert_stripped(lethe, file_id: str, kind: str, sent: bytes) -> bytes:
    row = lethe.file_row(file_id)
    stored = lethe.stored(file_id)
    assert row.metadata_stripped == "location" and row.object_key == original_key(file_id, 2)
    assert images.leaked(stored) == []
    assert images.opened(stored).tobytes() == images.opened(sent).tobytes()  # the pixels as uploaded
    if kind != "gif":
        assert images.opened(stored).getexif()[0x0112] == 6  # and the orientation
    # the row and the File document describe what is stored, not what was sent
    assert row.size_bytes == len(stored) < len(sent) and row.sha256 == hashlib.sha256(stored).hexdigest()
    document = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json
    assert document["size_bytes"] == len(stored) and document["sha256"] == row.sha256
    for answer in served_everywhere(lethe, file_id, kind):
        assert answer == stored
    if EXIFTOOL:  # and a reader no one here wrote finds none of it either
        named = " ".join(exiftool(stored))
        assert not any(gone in named for gone in ("GPS", "XMP", "MakerNote", "SerialNumber", "IPTC")), named
    # the original that held the position is gone, every version of it
    assert versions_of(lethe.raw_store, [original_key(file_id, 1)]) == []
    return stored


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_image_sent_through_the_api_is_stored_and_served_without_its_location(lethe, kind):
    sent = images.tagged(kind)
    file_id = lethe.upload(
        ALEX, sent, KINDS[kind], mime_type=f"image/{kind}", sha256=hashlib.sha256(sent).hexdigest()
    )  # declared for the bytes as sent
    assert_stripped(lethe, file_id, kind, sent)
    lethe.run_jobs()
    for name in ("thumb-small", "preview"):
        variant = lethe.call("GET", f"/api/v1/files/{file_id}/variants/{name}", ALEX)
        assert variant.status_code == 200 and images.metadata_of(variant.data) == {}


def test_an_image_sent_through_tus_is_stored_without_its_location(lethe):
    sent = images.tagged("jpeg")
    file_id = created_id(tus_create(lethe, len(sent), name="holiday.jpg", filetype="image/jpeg"))
    assert tus_patch(lethe, file_id, 0, sent).status_code == 204
    lethe.run_jobs("scan_file")
    assert_stripped(lethe, file_id, "jpeg", sent)


@pytest.mark.s3_only
def test_an_image_sent_straight_to_the_store_is_stored_without_its_location(make_lethe):
    lethe = make_lethe(**{"file.encryption": "off"})
    sent = images.tagged("jpeg")
    created = direct.create(
        lethe, sent, name="holiday.jpg", mime_type="image/jpeg", sha256=hashlib.sha256(sent).hexdigest()
    ).json
    direct.send_all(created, sent)
    file_id = created["file"]["id"]
    assert lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX).status_code == 200
    lethe.run_jobs("scan_file")
    stored = assert_stripped(lethe, file_id, "jpeg", sent)
    # a redirect sends the reader to the stripped original
    redirecting = make_lethe(**{"file.encryption": "off", "file.s3.download": "redirect"})
    answer = redirecting.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert answer.status_code == 302
    assert requests.get(answer.headers["Location"], timeout=30).content == stored


@pytest.mark.s3_only
def test_a_direct_upload_whose_bytes_are_not_what_was_declared_fails_and_is_not_stripped(make_lethe):
    lethe = make_lethe(**{"file.encryption": "off"})
    sent = images.tagged("jpeg")
    created = direct.create(lethe, sent, name="holiday.jpg", mime_type="image/jpeg", sha256="ab" * 32).json
    direct.send_all(created, sent)
    file_id = created["file"]["id"]
    lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    lethe.run_jobs("scan_file")
    row = lethe.file_row(file_id)
    assert row.upload_state == "failed" and row.metadata_stripped is None


@pytest.mark.one_store
def test_all_keeps_only_the_orientation_and_the_profile(make_lethe):
    lethe = make_lethe(**{"image.strip_metadata": "all"})
    file_id = lethe.upload(ALEX, images.tagged("jpeg"), "holiday.jpg", mime_type="image/jpeg")
    stored = lethe.stored(file_id)
    assert lethe.file_row(file_id).metadata_stripped == "all"
    kept = images.metadata_of(stored)
    assert set(kept) == {"exif", "icc_profile", "exif_tags"} and kept["exif_tags"] == {0x0112: 6}


@pytest.mark.one_store
def test_none_stores_the_image_as_sent_and_shows_it_inline_through_its_preview(make_lethe):
    lethe = make_lethe(**{"image.strip_metadata": "none"})
    sent = images.tagged("jpeg")
    file_id = lethe.upload(ALEX, sent, "holiday.jpg", mime_type="image/jpeg")
    row = lethe.file_row(file_id)
    assert lethe.stored(file_id) == sent and row.metadata_stripped is None and row.object_key.endswith("orig-1")
    before = lethe.client.get(link(lethe, file_id, "inline"))  # no preview yet: an attachment, as before
    assert before.headers["Content-Disposition"] == "attachment"
    lethe.run_jobs()
    after = lethe.client.get(link(lethe, file_id, "inline"))
    assert after.headers["Content-Type"] == "image/webp" and images.metadata_of(after.data) == {}


@pytest.mark.one_store
def test_an_image_with_nothing_to_remove_keeps_its_original_and_is_recorded(lethe):
    plain = images.one_pixel()
    file_id = lethe.upload(ALEX, plain, "dot.png", mime_type="image/png")
    row = lethe.file_row(file_id)
    assert row.metadata_stripped == "location" and row.object_key == original_key(file_id, 1)
    assert lethe.stored(file_id) == plain and row.sha256 == hashlib.sha256(plain).hexdigest()


@pytest.mark.one_store
def test_a_file_deleted_while_it_is_stripped_leaves_nothing(lethe, swap_store):
    sent = images.tagged("jpeg")
    file_id = lethe.upload(ALEX, sent, "holiday.jpg", mime_type="image/jpeg", scan=False)
    original_put = lethe.rt.files.store.put

    def delete_first(key, data, length, *args, **kwargs):
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
        lethe.run_jobs("purge_objects")  # the purge runs before the stripped original lands
        return original_put(key, data, length, *args, **kwargs)

    lethe.rt.files.store.put = delete_first
    try:
        lethe.run_jobs("scan_file")
    finally:
        lethe.rt.files.store.put = original_put
    lethe.run_jobs()
    assert versions_of(lethe.raw_store, [original_key(file_id, 1), original_key(file_id, 2)]) == []


@pytest.mark.one_store
def test_an_old_original_the_store_would_not_remove_is_removed_when_the_scan_job_comes_back(lethe):
    sent = images.tagged("jpeg")
    file_id = lethe.upload(ALEX, sent, "holiday.jpg", mime_type="image/jpeg", scan=False)
    failing = lethe.rt.files.store.delete_many

    def refuse(keys):
        from app.storage.base import DeleteFailure

        return [DeleteFailure(key, "unavailable") for key in keys]

    lethe.rt.files.store.delete_many = refuse
    try:
        with pytest.raises(StorageError):
            lethe.run_jobs("scan_file")
    finally:
        lethe.rt.files.store.delete_many = failing
    assert lethe.file_row(file_id).scan_status == "pending"  # not deliverable while the old original stays
    assert versions_of(lethe.raw_store, [original_key(file_id, 1)]) != []
    from workers.actors import ACTORS

    ACTORS["scan_file"].fn(lethe.rt, file_id)  # the job, retried
    assert versions_of(lethe.raw_store, [original_key(file_id, 1)]) == []
    assert lethe.file_row(file_id).scan_status == "skipped"
    assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == lethe.stored(file_id)


@pytest.mark.one_store
def test_a_second_run_of_the_same_step_leaves_the_original_the_first_recorded(lethe, monkeypatch):
    """A scan job sent twice (a redelivery, the cleanup's resend) runs the step twice on the same row: the
    second finds the key recorded by the first and must not remove it."""
    from app.content.strip import strip_original

    file_id = lethe.upload(ALEX, images.tagged("jpeg"), "holiday.jpg", mime_type="image/jpeg", scan=False)
    from app.storage.files import FileStore

    stale = lethe.file_row(file_id)
    writing = FileStore.write_original
    first = []

    def the_other_run_first(files, row, data):  # the second run has read orig-1; the first completes meanwhile
        monkeypatch.setattr(FileStore, "write_original", writing)
        first.append(strip_original(lethe.rt, stale))
        return writing(files, row, data)

    monkeypatch.setattr(FileStore, "write_original", the_other_run_first)
    second = strip_original(lethe.rt, stale)
    assert first[0].object_key == second.object_key == original_key(file_id, 2)
    assert strip_original(lethe.rt, stale).object_key == original_key(file_id, 2)  # a third, after orig-1 went
    lethe.run_jobs("scan_file")
    assert images.leaked(lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data) == []


@pytest.mark.one_store
def test_a_version_an_object_lock_keeps_does_not_hold_the_file_back(lethe):
    sent = images.tagged("jpeg")
    file_id = lethe.upload(ALEX, sent, "holiday.jpg", mime_type="image/jpeg", scan=False)
    removing = lethe.rt.files.store.delete_many

    def locked(keys):
        from app.storage.base import OBJECT_LOCKED, DeleteFailure

        return [DeleteFailure(key, OBJECT_LOCKED) for key in keys]

    lethe.rt.files.store.delete_many = locked
    try:
        lethe.run_jobs("scan_file")
    finally:
        lethe.rt.files.store.delete_many = removing
    assert lethe.file_row(file_id).scan_status == "skipped"  # deliverable: the locked copy is sealed, never served


@pytest.mark.one_store
def test_an_image_its_reader_cannot_follow_is_left_as_sent_and_shown_inline_only_through_its_preview(lethe):
    cut = images.tagged("png")
    cut = cut[: len(cut) // 2]
    file_id = lethe.upload(ALEX, cut, "map.png", mime_type="image/png")
    row = lethe.file_row(file_id)
    assert row.metadata_stripped is None and lethe.stored(file_id) == cut and row.object_key.endswith("orig-1")
    inline = lethe.client.get(link(lethe, file_id, "inline"))
    assert inline.headers["Content-Disposition"] == "attachment"  # no preview: it does not decode either


def test_tus_still_says_the_length_the_client_sent_after_the_scan(lethe):
    from tests.integration.test_tus import head

    sent = images.tagged("jpeg")
    file_id = created_id(tus_create(lethe, len(sent), name="holiday.jpg", filetype="image/jpeg"))
    assert tus_patch(lethe, file_id, 0, sent).status_code == 204
    lethe.run_jobs("scan_file")
    assert lethe.file_row(file_id).size_bytes < len(sent)
    asked = head(lethe, file_id)
    assert asked.headers["Upload-Offset"] == asked.headers["Upload-Length"] == str(len(sent))
    assert tus_patch(lethe, file_id, len(sent), b"").status_code == 204  # a client's last PATCH, replayed


def test_a_row_restored_from_before_the_strip_takes_up_the_stripped_original(lethe):
    """A backup taken between the completion and the scan, restored after the step ran: the row names orig-1,
    which is gone, and orig-2 is in the store. The scan sent again finds the stripped original and the file is
    deliverable without its location, not lost."""
    sent = images.tagged("jpeg")
    file_id = lethe.upload(ALEX, sent, "holiday.jpg", mime_type="image/jpeg", scan=False)
    before = lethe.file_row(file_id)
    from app.content.strip import strip_original

    assert strip_original(lethe.rt, before).object_key == original_key(file_id, 2)

    def restore(conn):  # the row as the backup holds it
        conn.execute(
            "UPDATE files SET object_key = %s, size_bytes = %s, sha256 = %s, metadata_stripped = NULL, "
            "size_as_sent = NULL WHERE id = %s",
            (before.object_key, before.size_bytes, before.sha256, file_id),
        )

    lethe.rt.db.unit_of_work(lambda uow: restore(uow.conn), name="test.restore")
    from workers.actors import ACTORS

    ACTORS["scan_file"].fn(lethe.rt, file_id)  # the scan the cleanup sends again
    row = lethe.file_row(file_id)
    assert row.scan_status == "skipped" and row.object_key == original_key(file_id, 2)
    stored = lethe.stored(file_id)
    assert row.size_bytes == len(stored) and row.sha256 == hashlib.sha256(stored).hexdigest()
    assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == stored
    assert images.leaked(stored) == []
