"""Rate limits on what costs: each limited operation counts per principal in fixed windows of the runtime's
clock, answers 429 rate_limited with Retry-After above its quota, and sends the IETF RateLimit-Policy and
RateLimit fields on every answer (read here by a structured-field parser no one here wrote); upload parts, tus
PATCH chunks and reads are never counted; a request without valid credentials counts against its address; the
cleanup removes ended windows."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from app.lifecycle.cleanup import run_cleanup
from tests.support.helpers import problem, rate_fields, rows
from tests.support.lethe import ALEX, OWNER, SAM

pytestmark = pytest.mark.one_store


def fields(response) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the policy's parameters, the current ones) of the answer's RateLimit-Policy and RateLimit."""
    return rate_fields(response.headers)


def create(lethe, person=ALEX, **headers):
    body = {"name": "Minutes.pdf", "size_bytes": 3, "mime_type": "application/pdf"}
    return lethe.call("POST", "/api/v1/uploads", person, json=body, headers=headers)


def test_create_upload_counts_per_principal_and_answers_429_with_the_fields(make_lethe):
    lethe = make_lethe(**{"rate_limits.uploads": "3/1m"})
    lethe.clock.set(lethe.clock.now().replace(second=10, microsecond=0))  # 50 s before the window ends
    for remaining in (2, 1, 0):
        response = create(lethe)
        assert response.status_code == 201
        policy, current = fields(response)
        assert policy == {"name": "uploads", "q": 3, "w": 60} and current == {"r": remaining, "t": 50}
    refused = create(lethe)
    body = problem(refused, 429, "too_many_requests", "rate_limited")
    assert refused.headers["Retry-After"] == "50" and fields(refused)[1] == {"r": 0, "t": 50}
    assert "Minutes" not in str(body)
    assert create(lethe, SAM).status_code == 201  # another principal has its own count
    lethe.clock.advance(timedelta(seconds=50))  # the next window
    assert create(lethe).status_code == 201


def test_parts_tus_chunks_and_reads_are_never_counted(make_lethe):
    lethe = make_lethe(**{"rate_limits.uploads": "2/1m", "rate_limits.completions": "2/1m"})
    data = b"x" * (lethe.part_size * 4)
    file_id = lethe.upload(ALEX, data)  # four parts, one creation, one completion
    for _ in range(10):
        for path in (f"/api/v1/files/{file_id}", f"/api/v1/files/{file_id}/content"):
            read = lethe.call("GET", path, ALEX)
            assert read.status_code == 200 and "RateLimit" not in read.headers
    created = create(lethe)  # the second creation of the window
    created_id = created.json["file"]["id"]
    for _ in range(5):  # the same part again and again
        sent = lethe.call("PUT", f"/api/v1/uploads/{created_id}/parts/1", ALEX, data=b"abc")
        assert sent.status_code == 200 and "RateLimit" not in sent.headers
    problem(create(lethe), 429, "too_many_requests", "rate_limited")
    tus = lethe.call(
        "POST",
        "/api/v1/tus",
        ALEX,
        headers={"Tus-Resumable": "1.0.0", "Upload-Length": "3", "Upload-Metadata": "filename bm90ZXMudHh0"},
    )
    assert tus.status_code == 429 and tus.headers["Tus-Resumable"] == "1.0.0"  # tus creation counts as creation


@pytest.mark.parametrize(
    "policy, request_of",
    [
        ("completions", lambda lethe, n: lethe.call("POST", f"/api/v1/uploads/{uuid.uuid4()}/complete", ALEX)),
        ("links", lambda lethe, n: lethe.call("POST", f"/api/v1/files/{uuid.uuid4()}/links", ALEX, json={})),
        (
            "batch_deletes",
            lambda lethe, n: lethe.call("POST", "/api/v1/files/batch-delete", ALEX, json={"ids": [str(uuid.uuid4())]}),
        ),
        ("erasures", lambda lethe, n: lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(n)})),
    ],
)
def test_every_costly_operation_is_limited_whatever_it_answers(make_lethe, policy, request_of):
    lethe = make_lethe(**{f"rate_limits.{policy}": "2/1h"})
    answers = [request_of(lethe, uuid.uuid4()) for _ in range(3)]
    assert all(fields(answer)[0] == {"name": policy, "q": 2, "w": 3600} for answer in answers)
    assert answers[0].status_code != 429 and answers[1].status_code != 429
    problem(answers[2], 429, "too_many_requests", "rate_limited")


def test_requests_without_valid_credentials_count_against_their_address(make_lethe):
    lethe = make_lethe(**{"rate_limits.uploads": "2/1m"})
    bad = {"Authorization": "Bearer not-a-token"}
    assert [create(lethe, None, **bad).status_code for _ in range(3)] == [401, 401, 429]
    assert create(lethe).status_code == 201  # a principal is counted apart from the address
    keys = [row.key for row in rows(lethe, "rate_counts")]
    assert len(keys) == 2 and all(key.startswith("uploads:") for key in keys)  # the address's count, and Alex's
    assert not any(secret in key for key in keys for secret in (str(ALEX.id), "not-a-token", "127.0.0.1"))


def test_an_empty_rate_is_no_limit(make_lethe):
    lethe = make_lethe(**{"rate_limits.uploads": ""})
    answers = [create(lethe) for _ in range(5)]
    assert all(answer.status_code == 201 and "RateLimit" not in answer.headers for answer in answers)
    assert rows(lethe, "rate_counts") == []


def test_the_cleanup_removes_ended_windows(make_lethe):
    lethe = make_lethe(**{"rate_limits.uploads": "5/1m"})
    create(lethe)
    assert len(rows(lethe, "rate_counts")) == 1
    lethe.clock.advance(timedelta(hours=23))
    assert run_cleanup(lethe.rt).ran and len(rows(lethe, "rate_counts")) == 1  # a window may last a day
    lethe.clock.advance(timedelta(hours=2))
    assert run_cleanup(lethe.rt).ran and rows(lethe, "rate_counts") == []
