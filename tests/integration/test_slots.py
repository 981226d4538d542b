"""Avatar and logo slots (D16, seed 002 "a sweep runs only on a real replacement"): every answer, release on
a real replacement only, and two concurrent replaces that release every file that left exactly once."""

from __future__ import annotations

import threading

import pytest

from tests.support.helpers import keys_of, problem, rows
from tests.support.lethe import ALEX, OWNER, SAM


def avatar_url(person) -> str:
    return f"/api/v1/principals/{person.id}/avatar"


def put_avatar(lethe, caller, holder, file_id):
    return lethe.call("PUT", avatar_url(holder), caller, json={"file_id": file_id})


def test_replacing_an_avatar_releases_the_previous_file_and_the_same_file_releases_nothing(lethe):
    first, second = lethe.upload(ALEX, purpose="avatar"), lethe.upload(ALEX, purpose="avatar")
    assert put_avatar(lethe, ALEX, ALEX, first).json == {"file_id": first}
    assert lethe.call("GET", avatar_url(ALEX), ALEX).json == {"file_id": first}
    assert put_avatar(lethe, ALEX, ALEX, first).status_code == 200  # the same file: nothing leaves
    assert lethe.row(first).deleted_at is None
    assert put_avatar(lethe, ALEX, ALEX, second).status_code == 200
    assert lethe.row(first).deleted_at is not None and lethe.row(second).deleted_at is None
    lethe.run_jobs("purge_objects")
    assert lethe.row(first) is None and all(lethe.store.head(key) is None for key in keys_of(first))
    assert [(str(r.file_id), r.via) for r in rows(lethe, "receipts")] == [(first, "slot")]
    # Clearing releases the current one; clearing an empty slot is nothing
    assert lethe.call("DELETE", avatar_url(ALEX), ALEX).status_code == 204
    assert lethe.row(second).deleted_at is not None
    problem(lethe.call("GET", avatar_url(ALEX), ALEX), 404, "not_found")
    assert lethe.call("DELETE", avatar_url(ALEX), ALEX).status_code == 204


@pytest.mark.one_store
def test_who_may_set_which_file(lethe, clamd):
    alex_avatar = lethe.upload(ALEX, purpose="avatar")
    owner_avatar = lethe.upload(OWNER, purpose="avatar")
    attachment = lethe.upload(ALEX)
    # Another user may neither set nor read Alex's slot
    problem(put_avatar(lethe, SAM, ALEX, alex_avatar), 403, "forbidden")
    problem(lethe.call("GET", avatar_url(ALEX), SAM), 403, "forbidden")
    # The file must be the holder's own, of purpose avatar, deliverable
    problem(put_avatar(lethe, OWNER, ALEX, owner_avatar), 409, "conflict", "file_not_available")
    problem(put_avatar(lethe, ALEX, ALEX, owner_avatar), 409, "conflict", "file_not_available")
    problem(
        put_avatar(lethe, ALEX, ALEX, "00000000-0000-4000-8000-000000000000"), 409, "conflict", "file_not_available"
    )
    problem(put_avatar(lethe, ALEX, ALEX, attachment), 409, "conflict", "wrong_purpose")
    pending = lethe.upload(ALEX, purpose="avatar", scan=False)
    lethe.rt.db.read(lambda conn: conn.execute("UPDATE files SET scan_status = 'infected' WHERE id = %s", (pending,)))
    problem(put_avatar(lethe, ALEX, ALEX, pending), 409, "conflict", "file_not_deliverable")
    # A manager sets a principal's avatar with the principal's own file
    assert put_avatar(lethe, OWNER, ALEX, alex_avatar).status_code == 200
    assert lethe.call("GET", avatar_url(ALEX), OWNER).json == {"file_id": alex_avatar}
    # deleteFile still refuses these purposes: the slot is how they go
    problem(lethe.call("DELETE", f"/api/v1/files/{alex_avatar}", ALEX), 409, "conflict", "purpose_not_deletable")
    problem(lethe.call("PUT", avatar_url(ALEX), ALEX, json={"file_id": "nope"}), 422, "invalid_request")


@pytest.mark.one_store
def test_the_logo_is_managed_by_manage_and_read_by_everyone(lethe):
    logo, other = lethe.upload(OWNER, purpose="branding"), lethe.upload(OWNER, purpose="branding")
    problem(
        lethe.call(
            "POST",
            "/api/v1/uploads",
            ALEX,
            json={"name": "l.png", "size_bytes": 3, "mime_type": "image/png", "purpose": "branding"},
        ),
        403,
        "forbidden",
    )
    problem(lethe.call("PUT", "/api/v1/branding/logo", ALEX, json={"file_id": logo}), 403, "forbidden")
    problem(lethe.call("GET", "/api/v1/branding/logo", ALEX), 404, "not_found")
    assert lethe.call("PUT", "/api/v1/branding/logo", OWNER, json={"file_id": logo}).status_code == 200
    assert lethe.call("GET", "/api/v1/branding/logo", ALEX).json == {"file_id": logo}
    assert lethe.call("PUT", "/api/v1/branding/logo", OWNER, json={"file_id": other}).status_code == 200
    assert lethe.row(logo).deleted_at is not None
    problem(lethe.call("DELETE", "/api/v1/branding/logo", ALEX), 403, "forbidden")
    assert lethe.call("DELETE", "/api/v1/branding/logo", OWNER).status_code == 204
    assert lethe.row(other).deleted_at is not None


@pytest.mark.one_store
def test_concurrent_replaces_release_every_file_that_left_exactly_once(lethe):
    rounds = 15
    files = {name: [lethe.upload(ALEX, purpose="avatar") for _ in range(rounds)] for name in ("a", "b")}
    first = lethe.upload(ALEX, purpose="avatar")
    assert put_avatar(lethe, ALEX, ALEX, first).status_code == 200
    from prometheus_client import REGISTRY

    released_before = REGISTRY.get_sample_value("lethe_files_deleted_total", {"via": "slot"}) or 0
    barrier = threading.Barrier(2)
    failures = []

    def replace(name):
        for file_id in files[name]:
            try:
                barrier.wait(timeout=30)
                response = put_avatar(lethe, ALEX, ALEX, file_id)
                assert response.status_code == 200, response.json
            except Exception as exc:
                failures.append(exc)

    threads = [threading.Thread(target=replace, args=(name,)) for name in files]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures
    final = lethe.call("GET", avatar_url(ALEX), ALEX).json["file_id"]
    every = [first, *files["a"], *files["b"]]
    marked = {str(row.id) for row in rows(lethe, "files") if row.deleted_at is not None}
    assert final not in marked
    assert marked == set(every) - {final}  # every file that left the slot was released
    # and exactly once: one release counted per file that left
    assert (REGISTRY.get_sample_value("lethe_files_deleted_total", {"via": "slot"}) or 0) - released_before == len(
        every
    ) - 1
