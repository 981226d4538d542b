"""The operator console: a one-time sign-in link, a session cookie bound to a `manage` principal, read-only pages
of ids and counts under a strict Content-Security-Policy, and no name of any file on any page."""

from __future__ import annotations

import json
import re
import sys
import uuid
from datetime import timedelta

import pytest

from app.api.console import COOKIE, CSP
from app.lifecycle.cleanup import run_cleanup
from app.lifecycle.console import make_link
from tests.support import zygote
from tests.support.lethe import ALEX, OWNER

pytestmark = pytest.mark.one_store
CANARY = "Canary-Console-payslip"
PAGES = ("/console/", "/console/holds", "/console/erasures", "/console/receipts", "/console/webhooks")


def signed_in(lethe):
    """A test client holding a console session (and the session's CSRF token)."""
    client = lethe.app.test_client()
    token = make_link(lethe.rt, uuid.uuid4(), timedelta(minutes=10))
    page = client.get(f"/console/sign-in/{token}")
    assert page.status_code == 200 and 'id="sign-in"' in page.get_data(as_text=True)
    answer = client.post(f"/console/sign-in/{token}")
    assert answer.status_code == 303 and answer.headers["Location"] == "/console/"
    overview = client.get("/console/")
    assert overview.status_code == 200
    (csrf,) = re.findall(r'name="csrf" value="([^"]+)"', overview.get_data(as_text=True))
    return client, token, csrf


def seeded(lethe):
    """Files in several states, all named with the canary: a live one, a held and deleted one, a purged one."""
    live = lethe.upload(ALEX, b"live", name=f"{CANARY}-live.txt")
    held = lethe.upload(ALEX, b"held", name=f"{CANARY}-held.txt")
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-31", "file_id": held}).json
    purged = lethe.upload(ALEX, b"purged", name=f"{CANARY}-purged.txt")
    for file_id in (held, purged):
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    lethe.run_jobs()
    return live, held, purged, hold["id"]


def test_a_link_signs_in_once_and_sets_a_strict_session_cookie(lethe):
    client = lethe.app.test_client()
    token = make_link(lethe.rt, uuid.uuid4(), timedelta(minutes=10))
    assert client.get("/console/").status_code == 401  # no session: the page says how to sign in
    assert client.get(f"/console/sign-in/{token}").status_code == 200  # a preview of the link does not use it
    answer = client.post(f"/console/sign-in/{token}")
    assert answer.status_code == 303
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    for attribute in ("HttpOnly", "SameSite=Strict", "Secure", "Path=/console", "Max-Age=28800"):
        assert attribute in cookie
    assert token not in cookie
    assert client.get("/console/").status_code == 200
    # Given the link used: refused, on its page and on its post, from any client
    for again in (client, lethe.app.test_client()):
        assert again.get(f"/console/sign-in/{token}").status_code == 403
        refused = again.post(f"/console/sign-in/{token}")
        assert refused.status_code == 403 and "Set-Cookie" not in refused.headers
    assert lethe.app.test_client().post("/console/sign-in/not-a-token").status_code == 403
    # Only digests are kept
    stored = lethe.rt.db.read(lambda conn: conn.execute("SELECT token_sha256 FROM console_sessions").fetchall())
    assert len(stored) == 1 and len(stored[0].token_sha256) == 32


def test_links_and_sessions_expire(lethe, clock):
    client = lethe.app.test_client()
    late = make_link(lethe.rt, uuid.uuid4(), timedelta(minutes=5))
    clock.advance(timedelta(minutes=6))
    assert client.get(f"/console/sign-in/{late}").status_code == 403
    assert client.post(f"/console/sign-in/{late}").status_code == 403
    client, _, _ = signed_in(lethe)
    clock.advance(lethe.cfg.api.console_session_ttl - timedelta(seconds=1))
    assert client.get("/console/holds").status_code == 200
    clock.advance(timedelta(seconds=2))
    assert client.get("/console/holds").status_code == 401
    # Expired links and sessions go at the next sign-in
    make_link(lethe.rt, uuid.uuid4(), timedelta(minutes=1))
    left = lethe.rt.db.read(
        lambda conn: conn.execute(
            "SELECT (SELECT count(*) FROM console_grants) AS links, (SELECT count(*) FROM console_sessions) AS s"
        ).fetchone()
    )
    assert (left.links, left.s) == (1, 0)
    with pytest.raises(ValueError):
        make_link(lethe.rt, uuid.uuid4(), timedelta(hours=2))


def test_sign_out_needs_the_sessions_token_and_ends_it(lethe):
    client, _, csrf = signed_in(lethe)
    assert client.post("/console/sign-out").status_code == 403
    assert client.post("/console/sign-out", data={"csrf": "x" * len(csrf)}).status_code == 403
    crossed = client.post("/console/sign-out", data={"csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert crossed.status_code == 403
    assert client.get("/console/").status_code == 200
    # Behind an ingress that ends TLS the browser's origin is https while the api hears http: the host decides
    out = client.post("/console/sign-out", data={"csrf": csrf}, headers={"Origin": "https://localhost"})
    assert out.status_code == 303 and out.headers["Location"] == "/console/signed-out"
    assert f"{COOKIE}=;" in out.headers["Set-Cookie"]
    assert client.get("/console/").status_code == 401
    assert lethe.rt.db.read(lambda conn: conn.execute("SELECT count(*) AS n FROM console_sessions").fetchone().n) == 0


def test_every_page_is_strict_and_name_free(lethe):
    live, held, purged, hold_id = seeded(lethe)
    run_cleanup(lethe.rt)
    client, _, _ = signed_in(lethe)
    pages = [*PAGES, "/console/webhooks?failed=1", f"/console/holds/{hold_id}"]
    pages += [f"/console/explain?id={file_id}" for file_id in (live, held, purged, uuid.uuid4(), ALEX.id)]
    for path in [*pages, "/console/explain", "/console/signed-out"]:
        answer = client.get(path)
        body = answer.get_data(as_text=True)
        assert answer.status_code == 200, (path, body[-2000:])
        assert answer.headers["Content-Security-Policy"] == CSP and answer.headers["Cache-Control"] == "no-store"
        assert answer.headers["X-Frame-Options"] == "DENY" and answer.headers["Referrer-Policy"] == "same-origin"
        assert CANARY not in body and "object_key" not in body and "sha256" not in body
        # No inline script or style: every script has a src of this image, no element has an event handler
        assert all(' src="/console/static/' in tag for tag in re.findall(r"<script[^>]*>", body)), path
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=|javascript:", body), path
        assert not re.search(r"(?:src|href)=\"https?://", body), path
    for name in ("console.js", "console.css"):
        asset = client.get(f"/console/static/{name}")
        assert asset.status_code == 200 and len(asset.get_data()) > 500


def test_the_overview_counts_what_the_commands_count(lethe):
    live, held, purged, hold_id = seeded(lethe)
    lethe.upload(ALEX, b"unscanned", name=f"{CANARY}.bin", scan=False)
    client, _, _ = signed_in(lethe)
    page = client.get("/console/").get_data(as_text=True)
    assert "No cleanup run recorded yet" in page
    assert re.search(r'id="holds-active">1<', page) and re.search(r'id="files-held">1<', page)
    run_cleanup(lethe.rt)
    page = client.get("/console/").get_data(as_text=True)
    steps = re.findall(r"<tr><td>([a-z])</td><td>([a-z_ ]+)</td>", page)
    assert len(steps) >= 18 and ("f", "backlog") in steps
    assert "The broker did not answer." in page  # the suite's recording broker has no queues to ask
    assert "Scans pending</dt><dd>1 (oldest" in page
    assert "Principals holding files</dt><dd>1<" in page and "Files, bytes held</dt><dd>3, 17 B<" in page
    # A refresh gets the page's <main> only
    partial = client.get("/console/", headers={"X-Console-Partial": "1"}).get_data(as_text=True)
    assert partial.lstrip().startswith('<main id="main" data-refresh="10">') and "<html" not in partial


def test_a_held_file_is_found_from_its_hold_and_explained(lethe):
    live, held, purged, hold_id = seeded(lethe)
    client, _, _ = signed_in(lethe)
    holds = client.get("/console/holds").get_data(as_text=True)
    assert f'href="/console/holds/{hold_id}"' in holds and "CASE-31" in holds
    hold = client.get(f"/console/holds/{hold_id}").get_data(as_text=True)
    assert f'href="/console/explain?id={held}"' in hold
    why = client.get(f"/console/explain?id={held}").get_data(as_text=True)
    assert '<span id="state">deleted</span>' in why and '<strong class="rule">hold</strong>' in why
    assert "CASE-31" in why and "the release of its legal holds" in why
    gone = client.get(f"/console/explain?id={purged}").get_data(as_text=True)
    assert '<span id="state">purged</span>' in gone and "receipt_expires" in gone
    person = client.get(f"/console/explain?id={ALEX.id}").get_data(as_text=True)
    assert f"Person {ALEX.id}" in person and "files live</dt><dd>1<" in person
    assert client.get("/console/explain?id=not-an-id").status_code == 400
    assert client.get(f"/console/holds/{uuid.uuid4()}").status_code == 404


def test_a_csp_report_is_counted_by_directive_only(lethe, caplog):
    report = {
        "csp-report": {
            "document-uri": f"http://localhost/console/explain?id={CANARY}",
            "effective-directive": "script-src-elem",
            "blocked-uri": f"https://evil.example/{CANARY}.js",
        }
    }
    answer = lethe.app.test_client().post(
        "/console/csp-report", data=json.dumps(report), content_type="application/csp-report"
    )
    assert answer.status_code == 204
    odd = {"csp-report": {"effective-directive": f"{CANARY} x"}}
    assert lethe.app.test_client().post("/console/csp-report", json=odd).status_code == 204
    assert lethe.app.test_client().post("/console/csp-report", data=b"\xff").status_code == 204
    seen = [record.__dict__ for record in caplog.records if getattr(record, "event", "") == "console.csp_violation"]
    assert [fields["directive"] for fields in seen] == ["script-src-elem", "unknown", "unknown"]
    assert CANARY not in repr(seen) + caplog.text


def test_lethe_console_prints_a_link_that_works_once(lethe, database_url, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LETHE_DATABASE_URL": database_url, "LETHE_FILE_FS_ROOT": str(tmp_path / "o")}
    shown = zygote.run(
        [sys.executable, "-m", "app.entry", "console", "--ttl", "5m", "--url", "https://files.example.com/"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    (link,) = re.findall(r"https://files\.example\.com/console/sign-in/\S+", shown.stdout)
    assert "within 5 min; it works once" in shown.stdout
    token = link.rsplit("/", 1)[1]
    assert token not in shown.stderr  # the link is the answer, never a log line
    client = lethe.app.test_client()
    assert client.post(f"/console/sign-in/{token}").status_code == 303
    assert lethe.app.test_client().post(f"/console/sign-in/{token}").status_code == 403
    as_json = zygote.run(
        [sys.executable, "-m", "app.entry", "console", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    doc = json.loads(as_json.stdout)
    assert doc["link"].startswith("http://127.0.0.1:8080/console/sign-in/") and doc["expires_in_s"] == 600
    too_long = zygote.run(
        [sys.executable, "-m", "app.entry", "console", "--ttl", "2h"], env=env, capture_output=True, text=True
    )
    assert too_long.returncode == 2 and "--ttl" in too_long.stdout


def test_a_bad_session_ttl_exits_2_naming_the_key(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LETHE_API_CONSOLE_SESSION_TTL": "10s"}
    checked = zygote.run(
        [sys.executable, "-m", "app.entry", "config", "check"], env=env, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 2 and "api.console_session_ttl" in checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr


def test_queue_depths_from_rabbitmq_from_the_in_process_broker_and_from_none(broker_url):
    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    from app.platform.jobs.broker import QUEUES, build_broker, queue_depths
    from tests.support.ports import free_port

    rabbit = build_broker(broker_url)
    try:
        depths = queue_depths(rabbit)
        assert depths is not None and set(depths) == set(QUEUES)
        assert all(isinstance(n, int) and n >= 0 for counts in depths.values() for n in counts)
        assert queue_depths(rabbit) is not None  # its channels were its own: asking again works
    finally:
        rabbit.close()
    stub = build_broker("")
    assert isinstance(stub, StubBroker)
    stub.enqueue(dramatiq.Message(queue_name="scan", actor_name="x", args=(), kwargs={}, options={}))
    in_process = queue_depths(stub)
    assert in_process is not None and in_process["scan"] == (1, 0, 0)
    down = build_broker(f"amqp://guest:guest@127.0.0.1:{free_port()}/")
    assert queue_depths(down) is None
