"""A JSON body sent without `Content-Type: application/json` answers 415 saying what to send, not 422
"Missing data" for fields that were sent (issue 14, point 6)."""

from __future__ import annotations

import json

import pytest

from tests.support.helpers import problem
from tests.support.lethe import ALEX

pytestmark = pytest.mark.one_store


def test_a_json_body_with_another_content_type_is_415(lethe):
    body = json.dumps({"name": "a.txt", "size_bytes": 3, "mime_type": "text/plain"})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        answer = problem(
            lethe.call("POST", "/api/v1/uploads", ALEX, data=body, headers=headers),
            415,
            "unsupported_media_type",
            "json_expected",
        )
        assert "application/json" in answer["detail"]
    assert (
        lethe.call("POST", "/api/v1/uploads", ALEX, data=body, headers={"Content-Type": "application/json"}).status_code
        == 201
    )


def test_bodiless_posts_and_raw_parts_are_not_affected(lethe):
    file_id = lethe.upload(ALEX)  # parts as application/octet-stream, complete without a body
    assert lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).status_code == 200
