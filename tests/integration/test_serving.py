"""Serving files (getFileContent, createFileLink, getLinkContent, listFiles) on every store: ranges, validators,
conditional answers, inline display decided by the bytes, links that work without a bearer header and stop at
once with the file, redirects to presigned GETs on S3, and the caller's list of files."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.helpers import problem
from tests.support.lethe import ALEX, OWNER, SAM

# A 1x1 PNG: a raster image a browser shows without running anything.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
HTML = b"<!DOCTYPE html><html><body><script>document.title='ran'</script></body></html>"
SVG = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
DATA = bytes(range(256)) * 40  # 10,240 bytes, every offset distinguishable
LINK_SECRET = "link-secret-for-the-tests-0123456789abcdef"


@pytest.fixture
def served(make_lethe):
    # The rules of the original's own inline display: an image's preview stands in for it by default
    # (image.strip_original, tests/integration/test_variants.py).
    return make_lethe(**{"file.link_secret": LINK_SECRET, "image.strip_original": "false"})


def content(lethe, file_id, person=ALEX, **headers):
    return lethe.call("GET", f"/api/v1/files/{file_id}/content", person, headers=headers)


def test_a_file_answers_whole_with_its_validators_and_any_one_range(served):
    file_id = served.upload(ALEX, DATA)
    whole = content(served, file_id)
    assert whole.status_code == 200 and whole.data == DATA
    assert whole.headers["Accept-Ranges"] == "bytes" and whole.headers["Content-Length"] == str(len(DATA))
    etag = whole.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/") and whole.headers["Last-Modified"].endswith("GMT")
    assert served.row(file_id).sha256 not in etag  # a tag, never a digest of the content
    assert whole.headers["Cache-Control"] == "private, no-cache"
    for header, expected in [
        ("bytes=0-9", DATA[:10]),
        ("bytes=100-", DATA[100:]),
        ("bytes=-5", DATA[-5:]),
        ("bytes=10239-99999", DATA[-1:]),
        ("bytes=-99999", DATA),
    ]:
        part = content(served, file_id, Range=header)
        assert part.status_code == 206, header
        assert part.data == expected, header
        first = len(DATA) - len(expected) if header.startswith("bytes=-") else int(header[6:].split("-")[0])
        assert part.headers["Content-Range"] == f"bytes {first}-{first + len(expected) - 1}/{len(DATA)}"
        assert part.headers["Content-Length"] == str(len(expected))
    refused = content(served, file_id, Range="bytes=10240-")
    assert refused.status_code == 416 and refused.headers["Content-Range"] == f"bytes */{len(DATA)}"
    assert refused.json["reason"] == "range_not_satisfiable"
    # Several ranges, another unit, or a malformed range: the whole file, as RFC 9110 allows
    for header in ("bytes=0-1,5-6", "items=0-1", "bytes=9-3", "bytes=abc"):
        other = content(served, file_id, Range=header)
        assert other.status_code == 200 and other.data == DATA, header


def test_conditional_requests_answer_304_412_and_if_range(served):
    file_id = served.upload(ALEX, DATA)
    first = content(served, file_id)
    etag, modified = first.headers["ETag"], first.headers["Last-Modified"]
    unchanged = content(served, file_id, **{"If-None-Match": etag})
    assert unchanged.status_code == 304 and unchanged.data == b"" and unchanged.headers["ETag"] == etag
    assert content(served, file_id, **{"If-None-Match": f'"other", W/{etag}'}).status_code == 304
    assert content(served, file_id, **{"If-Modified-Since": modified}).status_code == 304
    assert content(served, file_id, **{"If-None-Match": '"other"'}).status_code == 200
    assert content(served, file_id, **{"If-Match": '"other"'}).status_code == 412
    assert content(served, file_id, **{"If-Match": etag}).status_code == 200
    assert content(served, file_id, **{"Range": "bytes=0-3", "If-Range": etag}).status_code == 206
    stale = content(served, file_id, **{"Range": "bytes=0-3", "If-Range": '"stale"'})
    assert stale.status_code == 200 and stale.data == DATA  # the client's piece is of another version
    assert content(served, file_id, **{"Range": "bytes=0-3", "If-Range": modified}).status_code == 206
    # Another file's tag does not match this one
    other = served.upload(ALEX, DATA)
    assert content(served, other, **{"If-None-Match": etag}).status_code == 200


def test_head_answers_the_headers_without_the_bytes(served):
    file_id = served.upload(ALEX, DATA)
    head = served.call("HEAD", f"/api/v1/files/{file_id}/content", ALEX, headers={"Range": "bytes=0-99"})
    assert head.status_code == 206 and head.data == b""
    assert head.headers["Content-Length"] == "100" and head.headers["Content-Range"] == f"bytes 0-99/{len(DATA)}"


@pytest.mark.parametrize(
    "data, declared, shown",
    [
        (PNG, "image/png", "image/png"),
        (PNG, "image/jpeg", None),  # declared and detected differ: never shown
        (HTML, "image/png", None),  # an HTML file uploaded as an image is never rendered
        (HTML, "text/html", None),
        (SVG, "image/svg+xml", None),  # scriptable: never inline
        (b"plain words", "text/plain", None),
    ],
)
def test_inline_only_for_a_safe_type_that_the_bytes_show_and_the_uploader_declared(served, data, declared, shown):
    file_id = served.upload(ALEX, data, name="picture.png", mime_type=declared)
    answer = served.call("GET", f"/api/v1/files/{file_id}/content?disposition=inline", ALEX)
    assert answer.status_code == 200 and answer.data == data
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Content-Security-Policy"] == "sandbox"
    if shown:
        assert answer.headers["Content-Type"] == shown
        assert answer.headers["Content-Disposition"].startswith("inline;")
    else:
        assert answer.headers["Content-Type"] == "application/octet-stream"
        assert answer.headers["Content-Disposition"].startswith("attachment;")
    default = content(served, file_id)
    assert default.headers["Content-Type"] == "application/octet-stream"
    assert default.headers["Content-Disposition"].startswith("attachment;")


def make_link(lethe, file_id, person=ALEX, **body):
    return lethe.call("POST", f"/api/v1/files/{file_id}/links", person, json=body)


def link_path(answer) -> str:
    return urlsplit(answer.json["url"]).path


def test_a_link_works_without_a_bearer_header_and_names_nothing(served, clock):
    file_id = served.upload(ALEX, PNG, name="secret-holiday.png", mime_type="image/png")
    made = make_link(served, file_id, disposition="inline")
    assert made.status_code == 201, made.json
    url = made.json["url"]
    assert url.startswith("http://localhost/api/v1/links/")
    assert str(file_id) not in url and uuid.UUID(file_id).hex not in url and "holiday" not in url
    assert made.json["expires_at"].startswith((clock.now() + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M"))
    shown = served.client.get(link_path(made))  # no Authorization header
    assert shown.status_code == 200 and shown.data == PNG
    assert shown.headers["Content-Type"] == "image/png" and shown.headers["Content-Disposition"] == "inline"
    assert shown.headers["Cache-Control"] == "private, no-cache"
    assert "holiday" not in str(shown.headers)
    ranged = served.client.get(link_path(made), headers={"Range": "bytes=0-7"})
    assert ranged.status_code == 206 and ranged.data == PNG[:8]
    download = make_link(served, file_id)  # attachment by default, with no name
    assert served.client.get(link_path(download)).headers["Content-Disposition"] == "attachment"


def test_a_tampered_or_expired_link_is_403_and_a_deleted_files_link_404_at_once(served, clock):
    file_id = served.upload(ALEX, DATA)
    path = link_path(make_link(served, file_id, ttl="2m"))
    token = path.rsplit("/", 1)[1]
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    respelled = (
        token + "=",
        token[:9] + "." + token[9:],
        token[:9] + "%20" + token[9:],
        token[:9] + "~" + token[9:],
        token.replace("-", "+") if "-" in token else token + "==",
    )
    for bad in (flipped, token[:-10], "x", "A" * 80, *respelled):
        answer = served.client.get(f"/api/v1/links/{bad}")
        assert answer.status_code == 403 and answer.json["reason"] == "link_invalid", bad
    assert served.client.get(path).status_code == 200
    clock.advance(timedelta(minutes=2))
    expired = served.client.get(path)
    assert expired.status_code == 403 and expired.json["reason"] == "link_expired"
    fresh = link_path(make_link(served, file_id))
    assert served.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    gone = served.client.get(fresh)  # before any purge ran: the row says deleted
    assert gone.status_code == 404 and gone.json["code"] == "not_found"


def test_a_link_asks_what_reading_the_file_asks(served):
    file_id = served.upload(ALEX, DATA)
    assert make_link(served, file_id, SAM).status_code == 404  # another's file
    assert make_link(served, file_id, OWNER).status_code == 201  # manage reads any
    cut = make_link(served, file_id, ttl="11m")  # longer than file.link_ttl (10m here): cut to it
    assert cut.status_code == 201
    assert datetime.fromisoformat(cut.json["expires_at"]) <= served.clock.now() + timedelta(minutes=10)
    for wrong in ("soon", "0s", "9" * 5000 + "d", "999999999999999999999d", "90ms"):
        assert make_link(served, file_id, ttl=wrong).status_code == 422, wrong  # never a 500
    assert make_link(served, file_id, variant="thumb").status_code == 422  # no such variant name
    problem(make_link(served, file_id, variant="thumb-small"), 409, "conflict", "variant_unknown")  # none made
    unfinished = served.start_upload(ALEX, DATA)["file"]["id"]
    assert make_link(served, unfinished).status_code == 404  # not deliverable


def test_without_a_link_secret_links_answer_501(make_lethe):
    lethe = make_lethe(**{"file.link_secret": ""})
    file_id = lethe.upload(ALEX, DATA)
    refused = make_link(lethe, file_id)
    assert refused.status_code == 501 and refused.json["reason"] == "links_not_configured"
    assert "file.link_secret" in refused.json["detail"]


@pytest.mark.s3_only
def test_on_s3_a_redirect_sends_the_reader_to_a_short_presigned_get(make_lethe, raw_store):
    settings = {
        "file.link_secret": LINK_SECRET,
        "file.s3.download": "redirect",
        "file.s3.presign_ttl": "30s",
        "image.strip_original": "false",
    }
    lethe = make_lethe(**settings, **{"file.encryption": "off"})  # a file stored as it is
    file_id = lethe.upload(ALEX, PNG, mime_type="image/png", name="Redirect-Canary-4Kz.png")
    # No URL Lethe hands out names the file: not the attachment's redirect, not its query string
    from urllib.parse import unquote

    attachment = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert attachment.status_code == 302
    assert "Canary" not in unquote(unquote(attachment.headers["Location"]))
    fetched = requests.get(attachment.headers["Location"], timeout=10)
    assert fetched.status_code == 200 and fetched.headers["Content-Disposition"] == "attachment"
    answer = lethe.call("GET", f"/api/v1/files/{file_id}/content?disposition=inline", ALEX)
    assert answer.status_code == 302 and answer.headers["Cache-Control"] == "private, no-store"
    location = answer.headers["Location"]
    assert "X-Amz-Expires=30" in location and "holiday" not in location
    fetched = requests.get(location, timeout=10)
    assert fetched.status_code == 200 and fetched.content == PNG
    assert fetched.headers["Content-Type"] == "image/png"
    assert fetched.headers["Content-Disposition"].startswith("inline")
    ranged = requests.get(location, headers={"Range": "bytes=0-3"}, timeout=10)
    assert ranged.status_code == 206 and ranged.content == PNG[:4]
    # A link redirects the same way, for no longer than it lives itself
    link = link_path(make_link(lethe, file_id, disposition="inline", ttl="10s"))
    redirected = lethe.client.get(link)
    assert redirected.status_code == 302 and "X-Amz-Expires=10" in redirected.headers["Location"]
    # The checks come first: a deleted file is 404, never a redirect
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    assert lethe.client.get(link).status_code == 404
    # A sealed file has no URL to hand out: the store holds its ciphertext alone, which the api opens
    sealed = make_lethe(**settings)
    sealed_id = sealed.upload(ALEX, PNG, mime_type="image/png")
    proxied = sealed.call("GET", f"/api/v1/files/{sealed_id}/content?disposition=inline", ALEX)
    assert proxied.status_code == 200 and proxied.data == PNG and "Location" not in proxied.headers
    ranged = sealed.call("GET", f"/api/v1/files/{sealed_id}/content", ALEX, headers={"Range": "bytes=1-3"})
    assert ranged.status_code == 206 and ranged.data == PNG[1:4]


@pytest.mark.one_store
def test_presigned_urls_name_the_public_endpoint(moto_server):
    """Signed locally for the address clients reach; the store's own address stays the data path."""
    from app.entry.wiring import build_store
    from app.platform import config
    from app.storage.base import MultipartRef

    cfg = config.load(
        {
            "LETHE_FILE_STORAGE_DRIVER": "s3",
            "LETHE_FILE_S3_ENDPOINT": moto_server,
            "LETHE_FILE_S3_SECURE": "false",
            "LETHE_FILE_S3_ACCESS_KEY": "testing",
            "LETHE_FILE_S3_SECRET_KEY": "testing",
            "LETHE_FILE_S3_CREATE_BUCKET": "true",
            "LETHE_FILE_S3_BUCKET": f"public-{uuid.uuid4().hex[:8]}",
            "LETHE_FILE_S3_PUBLIC_ENDPOINT": "https://files.example.com",
        }
    )
    store = build_store(cfg)
    key = f"f/00/00/{uuid.UUID(int=1)}/orig-1"
    assert store.presign_get(key, timedelta(seconds=30), "image/png", "inline").startswith("https://files.example.com/")
    ref = MultipartRef(file_id=str(uuid.UUID(int=1)), key=key, upload_id="u1")
    assert store.presign_part(ref, 1, timedelta(seconds=30)).startswith("https://files.example.com/")
    store.check()  # and the store itself is still reached at its own address


@pytest.mark.one_store
def test_a_redirect_setting_on_fs_still_serves_the_bytes(make_lethe):
    lethe = make_lethe(**{"file.s3.download": "redirect"})
    file_id = lethe.upload(ALEX, DATA)
    assert content(lethe, file_id).data == DATA


def listing(lethe, person=ALEX, query=""):
    return lethe.call("GET", f"/api/v1/files{query}", person)


def test_list_files_newest_first_in_pages_without_the_deleted(served, clock):
    ids = []
    for index in range(5):
        ids.append(served.upload(ALEX, DATA, name=f"n{index}.txt"))
        clock.advance(timedelta(seconds=1))
    avatar = served.upload(ALEX, PNG, purpose="avatar", mime_type="image/png")
    clock.advance(timedelta(seconds=1))
    served.upload(SAM, DATA)  # someone else's
    served.call("DELETE", f"/api/v1/files/{ids[1]}", ALEX)
    pending = served.start_upload(ALEX, DATA)["file"]["id"]
    first = listing(served, query="?limit=3")
    assert first.status_code == 200, first.json
    assert [f["id"] for f in first.json["files"]] == [pending, avatar, ids[4]]
    rest = listing(served, query=f"?limit=3&after={first.json['next']}")
    assert [f["id"] for f in rest.json["files"]] == [ids[3], ids[2], ids[0]] and "next" not in rest.json
    only = listing(served, query="?purpose=avatar").json["files"]
    assert [f["id"] for f in only] == [avatar]
    assert [f["id"] for f in listing(served, query="?state=uploading").json["files"]] == [pending]
    assert listing(served, query=f"?uploader={SAM.id}").status_code == 403
    theirs = listing(served, OWNER, query=f"?uploader={ALEX.id}&limit=200").json["files"]
    assert len(theirs) == 6 and ids[1] not in [f["id"] for f in theirs]
    bad = listing(served, query="?after=notacursor")  # not of a cursor's form: the schema refuses it
    assert bad.status_code == 422 and "after" in bad.json["errors"]
    # any value of a cursor's form is a position (the contract says the form; nothing of that form is refused)
    assert listing(served, query="?after=" + "_" * 32).status_code == 200
    assert listing(served, query="?after=KqE3vX9gPZo0d2iKtXaGzdbeNtTm_IlW").status_code == 200


HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@pytest.mark.one_store
def test_no_generated_header_query_or_token_gets_a_5xx(served):
    """Range, If-Range, If-Match, If-None-Match, If-(Un)Modified-Since, the disposition and the link token as
    generated text: every answer is a documented one, never a 5xx."""
    file_id = served.upload(ALEX, DATA)
    link = link_path(make_link(served, file_id))

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        headers=st.dictionaries(
            st.sampled_from(
                ["Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"]
            ),
            HEADER_TEXT,
        ),
        disposition=HEADER_TEXT,
        token=HEADER_TEXT.filter(lambda t: "/" not in t and "?" not in t),
    )
    def check(headers, disposition, token):
        answers = [
            served.client.get(
                f"/api/v1/files/{file_id}/content",
                query_string={"disposition": disposition},
                headers={**ALEX.headers, **headers},
            ),
            served.client.get(f"/api/v1/files/{file_id}/content", headers={**ALEX.headers, **headers}),
            served.client.get(link, headers=headers),
            served.client.get(f"/api/v1/links/{token}", headers=headers),
        ]
        for answer in answers:
            assert answer.status_code in (200, 206, 304, 403, 404, 412, 416, 422), (headers, answer.status_code)
            answer.close()

    check()


def test_ranges_of_thousands_of_digits_on_every_path_are_ranges(lethe):
    """A Range position of more digits than Python's int() takes (4,300) answered 500 on getFileContent, links and
    variants; now it is a position past any end, on every store."""
    from tests.support import images

    file_id = lethe.upload(ALEX, images.photo(), "photo.jpg", mime_type="image/jpeg")
    lethe.run_jobs()
    paths = {
        "content": (f"/api/v1/files/{file_id}/content", ALEX.headers),
        "variant": (f"/api/v1/files/{file_id}/variants/thumb-small", ALEX.headers),
        "link": (link_path(make_link(lethe, file_id)), {}),
    }
    for name, (path, headers) in paths.items():
        for value, status in (
            ("bytes=0-" + "9" * 5000, 206),
            ("bytes=" + "9" * 5000 + "-", 416),
            ("bytes=-" + "9" * 5000, 206),
            ("bytes=" + "0" * 4400 + "1-2", 206),
        ):
            answer = lethe.client.get(path, headers={**headers, "Range": value})
            assert answer.status_code == status, (name, value[:12], answer.status_code)
