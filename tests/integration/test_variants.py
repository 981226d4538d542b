"""Image variants on fs, moto (versioned) and SeaweedFS (versioned): made after a file becomes deliverable, without
any metadata and with the orientation applied, recorded, shown in the File document and served like the original;
refused with a reason for what cannot or must not be decoded; and never outliving their file, whatever the
moment a delete, a purge or a hold meets the job."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.content import variants as variants_service
from app.db.conn import one
from app.domain.keys import VARIANTS, original_key, variant_key
from app.lifecycle.cleanup import run_cleanup
from tests.support import images
from tests.support.faults import Interleaved
from tests.support.helpers import problem, residue
from tests.support.lethe import ALEX, OWNER, SAM
from tests.support.stores import versions_of

STORES = pytest.mark.parametrize("raw_store", ["fs", "s3-versioned", "seaweed-versioned"], indirect=True)


def upload_image(
    lethe, data: bytes, mime_type: str = "image/jpeg", name: str = "IMG_0001.jpg", make: bool = True
) -> str:
    file_id = lethe.upload(ALEX, data, name=name, mime_type=mime_type)
    if make:
        lethe.run_jobs("make_variants")
    return file_id


def thumbnails(lethe, file_id, person=ALEX) -> list[dict[str, Any]]:
    answer = lethe.call("GET", f"/api/v1/files/{file_id}", person)
    assert answer.status_code == 200, answer.json
    return answer.json["thumbnails"]


def variant(lethe, file_id, name, person=ALEX, query: str = "", **headers):
    return lethe.call("GET", f"/api/v1/files/{file_id}/variants/{name}{query}", person, headers=headers)


def variant_rows(lethe, file_id) -> list[Any]:
    return lethe.rt.db.read(
        lambda conn: conn.execute(
            "SELECT name, state FROM file_variants WHERE file_id = %s ORDER BY name", (file_id,)
        ).fetchall()
    )


# -- what is made -----------------------------------------------------------------------------------------------


@STORES
def test_a_photo_gets_three_variants_without_metadata_turned_upright(lethe):
    original = images.photo(600, 400, orientation=6)
    assert images.metadata_of(original)["gps"]  # the test's photo does carry a position
    file_id = upload_image(lethe, original)
    shown = thumbnails(lethe, file_id)
    # orientation 6: the stored 600 x 400 is shown 400 x 600; each fitted in its box, never enlarged
    assert shown == [
        {"name": "thumb-small", "width": 107, "height": 160, "type": "image/webp"},
        {"name": "thumb-large", "width": 320, "height": 480, "type": "image/webp"},
        {"name": "preview", "width": 400, "height": 600, "type": "image/webp"},
    ]
    for thumb in shown:
        answer = variant(lethe, file_id, thumb["name"])
        assert answer.status_code == 200 and answer.headers["Content-Type"] == "application/octet-stream"
        picture = images.opened(answer.data)
        assert picture.format == "WEBP" and picture.size == (thumb["width"], thumb["height"])
        assert images.metadata_of(answer.data) == {}  # no EXIF, GPS, XMP, ICC
        assert b"Exif" not in answer.data and b"LetheCam" not in answer.data and b"GPS" not in answer.data
        assert lethe.stored(file_id, thumb["name"]) == answer.data
        assert answer.data not in lethe.raw_store.get(variant_key(file_id, thumb["name"]))  # sealed in the store
        # turned upright: the red half (the stored left) is now on top
        top, bottom = (
            picture.convert("RGB").getpixel((thumb["width"] // 2, 2)),
            picture.convert("RGB").getpixel((thumb["width"] // 2, thumb["height"] - 3)),
        )
        assert isinstance(top, tuple) and isinstance(bottom, tuple)
        assert top[0] > 150 > top[2] and bottom[2] > 150 > bottom[0]
    assert lethe.row(file_id).variants_state == "ready"
    assert [row.name for row in variant_rows(lethe, file_id)] == ["preview", "thumb-large", "thumb-small"]


@STORES
def test_alpha_animation_and_a_single_pixel(lethe):
    alpha = upload_image(lethe, images.png_with_alpha(), "image/png", "logo.png")
    small = images.opened(variant(lethe, alpha, "thumb-small").data)
    opaque, clear = small.getpixel((2, 50)), small.getpixel((150, 50))
    assert isinstance(opaque, tuple) and isinstance(clear, tuple)
    assert small.mode == "RGBA" and opaque[3] == 255 and clear[3] == 0

    animation = upload_image(lethe, images.animated_gif(frames=4), "image/gif", "dance.gif")
    names = [thumb["name"] for thumb in thumbnails(lethe, animation)]
    assert names == ["thumb-small", "thumb-large", "preview", "poster"]
    moving = images.opened(variant(lethe, animation, "thumb-small").data)
    assert getattr(moving, "n_frames", 1) == 4  # the thumbnails move
    poster = images.opened(variant(lethe, animation, "poster").data)
    assert getattr(poster, "n_frames", 1) == 1 and poster.size == (200, 120)  # the first frame, still

    dot = upload_image(lethe, images.one_pixel(), "image/png", "dot.png")
    assert {(t["width"], t["height"]) for t in thumbnails(lethe, dot)} == {(1, 1)}


@pytest.mark.one_store
@pytest.mark.parametrize(
    "data, mime_type, reason",
    [
        (images.truncated_jpeg(), "image/jpeg", "undecodable"),
        (images.png_bomb(), "image/png", "too_many_pixels"),
    ],
)
def test_what_cannot_or_must_not_be_decoded_gets_no_variants_and_a_reason(lethe, data, mime_type, reason):
    if reason == "too_many_pixels":
        assert len(data) < 20_000  # a few KB that declare 10 gigapixels
    file_id = upload_image(lethe, data, mime_type, "broken.img")
    row = lethe.row(file_id)
    assert (row.variants_state, row.variants_reason) == ("refused", reason)
    assert thumbnails(lethe, file_id) == [] and variant_rows(lethe, file_id) == []
    assert [key for key in VARIANTS if lethe.raw_store.head(variant_key(file_id, key))] == []
    problem(variant(lethe, file_id, "thumb-small"), 404, "not_found")
    # the file itself stays deliverable
    whole = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert whole.status_code == 200 and whole.data == data


@pytest.mark.one_store
def test_svg_and_other_types_are_never_decoded(lethe, make_lethe):
    svg = lethe.upload(ALEX, images.SVG, name="logo.svg", mime_type="image/svg+xml")
    text = lethe.upload(ALEX, b"just words", name="notes.txt")
    assert lethe.broker.take("make_variants") == []  # no job: nothing to decode
    assert lethe.row(svg).variants_state is None and lethe.row(text).variants_state is None
    # a photo over image.max_size is refused without being read
    small = make_lethe(**{"image.max_size": "1KiB"})
    file_id = upload_image(small, images.photo())
    assert (small.row(file_id).variants_state, small.row(file_id).variants_reason) == ("refused", "too_large")
    # and with image.variants off, no job either
    off = make_lethe(**{"image.variants": "false"})
    off.upload(ALEX, images.photo(), name="a.jpg", mime_type="image/jpeg")
    assert off.broker.take("make_variants") == []


def test_the_imaging_port_refuses_a_bomb_from_its_header_without_swelling():
    # In a process of its own, so its peak memory is the port's alone
    script = (
        "import resource, sys\n"
        "from app.content.imaging import make_variants, Refused\n"
        "from app.domain.variants import Sizes\n"
        "from tests.support.images import png_bomb, photo\n"
        "make_variants(photo(), Sizes(160, 480, 1600), 1 << 26, 90_000_000, 30)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "for _ in range(20):\n"
        "    assert make_variants(png_bomb(), Sizes(160, 480, 1600), 1 << 26, 90_000_000, 30) == "
        "Refused('too_many_pixels')\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    grown_kib = int(
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=str(Path(__file__).parents[2]),
        ).stdout.strip()
    )
    assert grown_kib < 50 * 1024  # 10 gigapixels would be >1 GiB at one bit each


@pytest.mark.one_store
def test_a_decode_past_its_time_limit_is_refused(lethe, make_lethe, monkeypatch):
    import app.content.imaging as imaging

    class Spent(imaging._Deadline):  # a fake clock for the deadline: its time is up at once
        def __init__(self, seconds):
            super().__init__(seconds)
            self.ends = time.monotonic() - 1

    monkeypatch.setattr(imaging, "_Deadline", Spent)
    file_id = upload_image(lethe, images.photo())
    assert (lethe.row(file_id).variants_state, lethe.row(file_id).variants_reason) == ("refused", "timeout")


# -- served like the original -----------------------------------------------------------------------------------


@pytest.mark.one_store
def test_a_variant_answers_ranges_validators_head_and_links(lethe, clock):
    file_id = upload_image(lethe, images.photo())
    whole = variant(lethe, file_id, "thumb-large")
    data, etag = whole.data, whole.headers["ETag"]
    assert whole.headers["Accept-Ranges"] == "bytes" and whole.headers["Cache-Control"] == "private, no-cache"
    assert whole.headers["Content-Disposition"] == "attachment"  # a variant names no file name
    original_etag = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).headers["ETag"]
    assert etag != original_etag
    part = variant(lethe, file_id, "thumb-large", Range="bytes=0-9")
    assert part.status_code == 206 and part.data == data[:10]
    assert part.headers["Content-Range"] == f"bytes 0-9/{len(data)}"
    assert variant(lethe, file_id, "thumb-large", **{"If-None-Match": etag}).status_code == 304
    head = lethe.call("HEAD", f"/api/v1/files/{file_id}/variants/thumb-large", ALEX)
    assert head.status_code == 200 and head.data == b"" and head.headers["Content-Length"] == str(len(data))
    inline = variant(lethe, file_id, "thumb-large", query="?disposition=inline")
    assert inline.headers["Content-Type"] == "image/webp" and inline.headers["Content-Disposition"] == "inline"
    # visibility is the original's: Sam sees nothing, the manager everything
    problem(variant(lethe, file_id, "thumb-large", person=SAM), 404, "not_found")
    assert variant(lethe, file_id, "thumb-large", person=OWNER).data == data
    for name in ("poster", "orig-1", "..", "v-thumb-small", "x" * 40):
        assert variant(lethe, file_id, name).status_code == 404, name
    # a link to a variant, loaded without a bearer header
    made = lethe.call(
        "POST", f"/api/v1/files/{file_id}/links", ALEX, json={"disposition": "inline", "variant": "thumb-small"}
    )
    assert made.status_code == 201, made.json
    shown = lethe.client.get(urlsplit(made.json["url"]).path)
    assert shown.status_code == 200 and shown.headers["Content-Type"] == "image/webp"
    assert shown.data == variant(lethe, file_id, "thumb-small").data
    none = lethe.call("POST", f"/api/v1/files/{file_id}/links", ALEX, json={"variant": "poster"})
    problem(none, 409, "conflict", "variant_unknown")
    # deleted: the variant and its link are 404 at once
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    assert lethe.client.get(urlsplit(made.json["url"]).path).status_code == 404
    problem(variant(lethe, file_id, "thumb-small"), 404, "not_found")


@pytest.mark.one_store
def test_inline_display_of_a_photo_stored_as_sent_shows_its_preview_never_its_location(make_lethe):
    """With image.strip_metadata none (and for HEIC, AVIF, files stored before stripping) the original keeps its
    metadata: inline display goes through the preview. (A stripped original is shown itself: test_strip.py.)"""
    lethe = make_lethe(**{"image.strip_metadata": "none"})
    original = images.photo()
    file_id = upload_image(lethe, original, make=False)
    # while no preview is ready, the original is an attachment, never shown
    waiting = lethe.call("GET", f"/api/v1/files/{file_id}/content?disposition=inline", ALEX)
    assert waiting.headers["Content-Disposition"].startswith("attachment")
    assert waiting.headers["Content-Type"] == "application/octet-stream"
    lethe.run_jobs("make_variants")
    shown = lethe.call("GET", f"/api/v1/files/{file_id}/content?disposition=inline", ALEX)
    assert shown.headers["Content-Type"] == "image/webp" and shown.headers["Content-Disposition"].startswith("inline")
    assert shown.data == variant(lethe, file_id, "preview").data and images.metadata_of(shown.data) == {}
    made = lethe.call("POST", f"/api/v1/files/{file_id}/links", ALEX, json={"disposition": "inline"})
    assert lethe.client.get(urlsplit(made.json["url"]).path).data == shown.data
    # the original is still the uploader's to download, as an attachment
    assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == original
    # image.strip_original false: the original itself is shown (the operator's choice)
    keep = make_lethe(**{"image.strip_original": "false", "image.strip_metadata": "none"})
    kept = keep.call("GET", f"/api/v1/files/{file_id}/content?disposition=inline", ALEX)
    assert kept.headers["Content-Type"] == "image/jpeg" and kept.data == original


@pytest.mark.one_store
def test_the_ready_event_carries_thumbnails_and_deletion_redacts_them(lethe):
    file_id = upload_image(lethe, images.photo())
    events = lethe.call("GET", "/api/v1/events", ALEX).json["events"]
    last = [event for event in events if event["payload"]["file"]["id"] == file_id][-1]
    assert [thumb["name"] for thumb in last["payload"]["file"]["thumbnails"]] == [
        "thumb-small",
        "thumb-large",
        "preview",
    ]
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    events = lethe.call("GET", "/api/v1/events", ALEX).json["events"]
    for event in (event for event in events if event["payload"]["file"]["id"] == file_id):
        assert event["redacted"] and event["payload"]["file"]["thumbnails"] == []


# -- the guarantee ----------------------------------------------------------------------------------------------


def everything_of(lethe, file_id) -> list[Any]:
    keys = [original_key(file_id, 1), original_key(file_id, 2)] + [variant_key(file_id, name) for name in VARIANTS]
    return versions_of(lethe.raw_store, keys)


def delete(lethe, file_id):
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204


def purge(lethe):
    lethe.run_jobs("purge_objects")


@STORES
@pytest.mark.parametrize(
    "moment",
    [
        "before_the_job",
        "purged_before_the_job",
        "between_record_and_write",
        "purged_between_record_and_write",
        "purged_between_write_and_ready",
    ],
)
def test_a_variants_job_racing_a_delete_or_a_purge_leaves_nothing(lethe, swap_store, moment):
    file_id = upload_image(lethe, images.photo(), make=False)
    if moment == "before_the_job":
        delete(lethe, file_id)
    elif moment == "purged_before_the_job":
        delete(lethe, file_id)
        purge(lethe)
    else:

        def action():
            delete(lethe, file_id)
            if moment.startswith("purged"):
                purge(lethe)

        # the first variant's write is the moment: before it (record done, nothing written) or after the last
        when, call = ("before", 1) if "record_and_write" in moment else ("after", 3)
        swap_store(lethe, Interleaved(lethe.rt.store, "put", action, when=when, call=call))
    lethe.run_jobs("make_variants")
    purge(lethe)
    assert lethe.row(file_id) is None
    assert everything_of(lethe, file_id) == [] and residue(lethe.raw_store, file_id) == []


@pytest.mark.parametrize("raw_store", ["fs", "seaweed-versioned"], indirect=True)
def test_a_hold_keeps_variants_written_after_the_delete_until_its_release(lethe, swap_store):
    from tests.integration.test_one_rule import place, release

    file_id = upload_image(lethe, images.photo(), make=False)
    hold = place(lethe, subject_id=ALEX.id)
    swap_store(lethe, Interleaved(lethe.rt.store, "put", lambda: delete(lethe, file_id), when="before"))
    lethe.run_jobs("make_variants")
    purge(lethe)
    kept = [name for name in VARIANTS if lethe.raw_store.head(variant_key(file_id, name))]
    assert kept == ["thumb-small", "thumb-large", "preview"]  # every byte of a held file stays
    release(lethe, hold["id"])
    lethe.run_jobs()
    assert lethe.row(file_id) is None and residue(lethe.raw_store, file_id) == []


def test_a_retried_job_of_a_purged_file_removes_what_its_failed_try_wrote(lethe, swap_store):
    file_id = upload_image(lethe, images.photo(), make=False)
    job = lethe.broker.take("make_variants")
    written: list[Any] = []

    class PurgedThenDies:
        """The file is deleted and purged while the job runs; its first write lands after the purge, and the
        worker dies before it can record anything."""

        driver = lethe.rt.store.driver

        def __init__(self, store):
            self._store = store

        def __getattr__(self, name):
            return getattr(self._store, name)

        def put(self, key, *args, **kwargs):
            lethe.rt.store = real
            delete(lethe, file_id)
            purge(lethe)
            real.put(key, *args, **kwargs)
            written.append(key)
            raise ConnectionError("the worker died here")

    real = swap_store(lethe, PurgedThenDies(lethe.rt.store))
    with pytest.raises(ConnectionError):
        variants_service.make_variants(lethe.rt, uuid.UUID(file_id))
    assert lethe.row(file_id) is None and lethe.raw_store.head(written[0]) is not None  # a late write
    # dramatiq delivers the job again: the retry finds the file gone and removes what the dead try wrote
    lethe.broker.messages.extend(job)
    lethe.run_jobs("make_variants")
    assert residue(lethe.raw_store, file_id) == []


@pytest.mark.one_store
def test_receipts_audit_and_cleanup_count_variants(lethe, clock):
    file_id = upload_image(lethe, images.photo())
    gif = upload_image(lethe, images.animated_gif(), "image/gif", "a.gif")
    from app.lifecycle.audit import run_audit

    report = run_audit(lethe.rt).as_dict()
    assert report["variants"] == 7 and report["variants_unrecorded"]["count"] == 0
    delete(lethe, file_id)
    delete(lethe, gif)
    purge(lethe)
    receipts = {fid: lethe.call("GET", f"/api/v1/receipts/{fid}", OWNER).json for fid in (file_id, gif)}
    assert receipts[file_id]["variants_deleted"] == 3 and receipts[gif]["variants_deleted"] == 4
    assert receipts[file_id]["keys_deleted"] >= 1 + len(VARIANTS)


@pytest.mark.one_store
def test_a_variants_job_that_never_comes_back_is_sent_again_once_then_ended(lethe, clock):
    file_id = upload_image(lethe, images.photo(), make=False)
    assert lethe.broker.take("make_variants")  # the job is lost
    ttl = lethe.cfg.image.pending_ttl
    clock.advance(ttl + timedelta(seconds=1))
    assert run_cleanup(lethe.rt).first_error is None
    resent = lethe.broker.take("make_variants")
    assert len(resent) == 1 and lethe.row(file_id).variants_state == "pending"
    clock.advance(ttl + timedelta(seconds=1))  # the resent job is lost too
    assert run_cleanup(lethe.rt).first_error is None
    row = lethe.row(file_id)
    assert (row.variants_state, row.variants_reason) == ("refused", "lost")
    assert lethe.broker.take("make_variants") == []
    assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).status_code == 200


@pytest.mark.one_store
def test_names_never_reach_a_log_line(lethe, caplog):
    caplog.set_level("DEBUG")
    file_id = upload_image(lethe, images.photo(), name="Jane-at-home-GPS.jpg")
    upload_image(lethe, images.truncated_jpeg(), name="Jane-broken.jpg")
    delete(lethe, file_id)
    purge(lethe)
    text = "\n".join(
        f"{record.getMessage()} {record.__dict__}" for record in caplog.records if record.name.startswith("lethe")
    )
    assert "variants.ready" in text and "variants.refused" in text  # the lines are there
    assert "Jane" not in text and "LetheCam" not in text and not re.search(r"f/[0-9a-f]{2}/", text)


@pytest.mark.one_store
def test_removing_late_variants_is_no_point_of_no_return_for_a_hold(lethe, swap_store):
    from tests.integration.test_one_rule import place

    file_id = upload_image(lethe, images.photo(), make=False)
    swap_store(lethe, Interleaved(lethe.rt.store, "put", lambda: delete(lethe, file_id), when="before"))
    lethe.run_jobs("make_variants")  # its variants went at once: the file was deleted while they were made
    assert lethe.row(file_id).removal_begun_at is None
    hold = place(lethe, subject_id=ALEX.id)  # a hold placed now keeps the file whole, and says it lost nothing
    assert hold["files_lost"] == 0 and hold["files_deferred"] == 1
    purge(lethe)
    assert lethe.raw_store.head(lethe.row(file_id).object_key) is not None


def forget_type(lethe, file_id) -> None:
    """The file as a release before type detection left it: no type read, no variants offered."""
    lethe.rt.db.read(
        lambda conn: conn.execute(
            "UPDATE files SET detected_type = NULL, variants_state = NULL WHERE id = %s", (file_id,)
        )
    )


@pytest.mark.one_store
def test_words_are_recorded_as_read_at_their_completion_and_the_cleanup_leaves_them(lethe):
    # A file whose first bytes show no known type is recorded as read when it completes, as step p records it:
    # unread, each was read again (and its row locked) by the next cleanup, beside the jobs that act on it
    text = lethe.upload(ALEX, b"just some words, no known signature" * 3, name="notes.txt")
    assert lethe.row(text).detected_type == ""
    step = next(r for r in run_cleanup(lethe.rt).steps if r.step == "p")
    assert (step.candidates, step.acted) == (0, 0)


@STORES
def test_files_completed_before_type_detection_are_read_once_and_their_images_get_variants(lethe, swap_store):

    photo = upload_image(lethe, images.photo(), make=False)
    text = lethe.upload(ALEX, b"just some words, no known signature" * 3, name="notes.txt")
    unreadable = upload_image(lethe, images.png_with_alpha(), mime_type="image/png", name="later.png", make=False)
    lethe.broker.take("make_variants")
    for file_id in (photo, text, unreadable):
        forget_type(lethe, file_id)
    # Given old files: an attachment of octet-stream, no thumbnails
    assert (
        lethe.call("GET", f"/api/v1/files/{photo}/content", ALEX).headers["Content-Type"] == "application/octet-stream"
    )
    original = lethe.rt.store
    fails_for = {unreadable}

    class OneUnreadable:
        """The store, but every call about one file's objects fails as an outage would."""

        driver = original.driver

        def __getattr__(self, name):
            attribute = getattr(original, name)

            def call(*args, **kwargs):
                if args and isinstance(args[0], str) and any(str(file_id) in args[0] for file_id in fails_for):
                    from app.errors import StorageError

                    raise StorageError("injected outage")
                return attribute(*args, **kwargs)

            return call if callable(attribute) else attribute

    swap_store(lethe, OneUnreadable())
    # When the cleanup runs
    report = run_cleanup(lethe.rt)
    step = next(r for r in report.steps if r.step == "p")
    assert (step.candidates, step.acted, step.kept) == (3, 2, 1)
    # Then the photo's type is read and its variants are on their way; words show no known type, read once
    assert lethe.row(photo).detected_type == "image/jpeg" and lethe.row(photo).variants_state == "pending"
    assert lethe.row(text).detected_type == ""
    assert lethe.row(unreadable).detected_type is None  # read again next run
    assert lethe.run_jobs("make_variants") == 1  # the photo's, and only it
    assert lethe.row(photo).variants_state == "ready"
    assert [t["name"] for t in thumbnails(lethe, photo)] == ["thumb-small", "thumb-large", "preview"]
    # and the next run reads only what it could not read before
    fails_for.clear()
    step = next(r for r in run_cleanup(lethe.rt).steps if r.step == "p")
    assert (step.candidates, step.acted) == (1, 1)
    assert lethe.row(unreadable).detected_type == "image/png"
    assert next(r for r in run_cleanup(lethe.rt).steps if r.step == "p").candidates == 0


@pytest.mark.one_store
def test_the_database_takes_the_names_of_the_variants_described_and_no_other(lethe):
    """A variant added to app/domain/variants.py needs its name in file_variants' CHECK (a migration)."""
    import re

    from app.domain.variants import VARIANTS

    check = lethe.rt.db.read(
        lambda conn: one(
            conn.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'file_variants'::regclass "
                "AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%name%'"
            )
        )[0]
    )
    assert set(re.findall(r"'([a-z-]+)'::text", check)) == set(VARIANTS)


@pytest.mark.one_store
def test_a_thumbnail_configured_larger_than_the_preview_is_never_larger_than_it(make_lethe):
    lethe = make_lethe(**{"image.thumb_large": "300", "image.preview": "200"})
    file_id = upload_image(lethe, images.photo(600, 400, orientation=1))
    shown = {thumb["name"]: (thumb["width"], thumb["height"]) for thumb in thumbnails(lethe, file_id)}
    assert shown["preview"] == (200, 133) and shown["thumb-large"] == shown["preview"]
