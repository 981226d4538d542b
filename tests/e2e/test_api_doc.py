"""docs/api.md runs as written (issue 14, point 2): every shell block, in order, in one bash with `set -e`,
against a live `lethe dev` started in a folder of its own (only the port differs from the doc's 8080)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http
from tests.support.services import service_missing

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def shell_blocks(markdown: str) -> list[str]:
    return [textwrap.dedent(block) for block in re.findall(r"^[ \t]*```sh\n(.*?)^[ \t]*```", markdown, re.M | re.S)]


S3_ONLY = "# with the s3 driver"
BLOCK_MARK = "::api-doc-block::"


def examples_of(block: str) -> list[str]:
    """The example outputs a block shows in its comments: a JSON object or array, on comment lines of their own
    (continued on the next comment lines) or after a command; what follows two spaces is the doc's commentary."""
    found, pending = [], None
    for line in block.splitlines():
        stripped = line.strip()
        own = stripped.startswith("#")
        text = stripped[1:].strip() if own else (line.split("   # ", 1)[1].strip() if "   # " in line else "")
        if pending is not None and own and text.startswith('"'):
            pending = balanced(pending + " " + text)  # a continuation of a multi-line object
            continue
        if pending is not None:
            found.append(pending)
            pending = None
        start = min((text.find(c) for c in "{[" if c in text), default=-1)
        if text and start != -1 and (own and start == 0 or not own):
            pending = balanced(text[start:])
    if pending is not None:
        found.append(pending)
    return found


def balanced(text: str) -> str:
    """The JSON value `text` opens with, to its closing bracket (or all of it: continued on the next lines)."""
    depth, quoted, escaped = 0, False, False
    for index, char in enumerate(text):
        if quoted:
            escaped, quoted = (False, True) if escaped else (char == "\\", char != '"')
            continue
        if char == '"':
            quoted = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return text[: index + 1]
    return text


PAIR = re.compile(r'"(\w+)":\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null|\[\])')


def shown(example: str, printed: str) -> bool:
    """Whether what a block printed holds its example: every `"key": value` the example states (values with an
    ellipsis are anything) in one JSON object it printed, at any depth; an example without keys, a printed line
    equal to it."""
    import json

    pairs = [
        (key, json.loads(value)) for key, value in PAIR.findall(example) if "…" not in value and "..." not in value
    ]
    if not pairs:
        wanted = re.escape(re.sub(r"\s+", "", example)).replace(re.escape("..."), ".*").replace(re.escape("…"), ".*")
        return any(re.fullmatch(wanted, re.sub(r"\s+", "", line)) for line in printed.splitlines())

    def objects(value):
        if isinstance(value, dict):
            yield value
            for inner in value.values():
                yield from objects(inner)
        elif isinstance(value, list):
            for inner in value:
                yield from objects(inner)

    for line in printed.splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        found = {key: value for item in objects(parsed) for key, value in item.items()}
        if all(key in found and found[key] == value for key, value in pairs):
            return True
    return False


READER_PAUSE = """
import os, time
import psycopg

deadline = time.monotonic() + 60
with psycopg.connect(os.environ["LETHE_DATABASE_URL"], autocommit=True) as conn:
    while time.monotonic() < deadline:
        busy = conn.execute(
            "SELECT (SELECT count(*) FROM outbox)"
            " + (SELECT count(*) FROM files f WHERE deleted_at IS NOT NULL AND NOT EXISTS ("
            "    SELECT 1 FROM legal_holds h WHERE h.released_at IS NULL"
            "    AND (h.file_id = f.id OR h.subject_id = f.uploaded_by)))"
            " + (SELECT count(*) FROM files WHERE upload_state = 'complete' AND scan_status = 'pending')"
        ).fetchone()[0]
        if not busy:
            break
        time.sleep(0.1)
"""  # the first line of a block that needs the s3 driver (direct uploads)


@pytest.mark.parametrize("driver", ["fs", "s3"])
def test_every_shell_block_of_the_api_doc_runs_in_order(database_url, tmp_path, driver, request):
    """On fs, as `make run` gives it, every block but those marked for the s3 driver; on S3 (moto's server),
    every block."""
    for tool in ("curl", "jq"):
        if shutil.which(tool) is None:
            service_missing(f"{tool} (Debian package {tool})", "not installed")
    blocks = shell_blocks((ROOT / "docs" / "api.md").read_text())
    assert len(blocks) >= 10 and any(block.startswith(S3_ONLY) for block in blocks)
    store_env: dict[str, str] = {}
    if driver == "fs":
        blocks = [block for block in blocks if not block.startswith(S3_ONLY)]
    else:
        from tests.support.roles import with_driver

        # as the direct upload section says: S3, and files stored as they are (the fs run reads every other
        # block sealed, as make run gives it)
        store_env = dict(with_driver({}, "s3", request)[0], LETHE_FILE_ENCRYPTION="off")
    port = free_port()
    # What the doc says a reader sees, checked where the reader sees it: after the events block, the events of the
    # files deleted above are redacted and those of the tuspy upload are not; a repeated deleteFile answers 404.
    events = next(i for i, block in enumerate(blocks) if "/events?after=0" in block)
    claims = """
    test "$(curl -sS --fail-with-body "$B/events?after=0&limit=1" -H "$AUTH" | jq -r '.events[0].redacted')" = true
    curl -sS --fail-with-body "$B/events?after=0&limit=100" -H "$AUTH" \\
      | jq -e '[.events[] | select(.redacted == false and .payload.file.original_name == "big.bin")] | length > 0'
    test "$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE $B/files/$OTHER -H "$AUTH")" = 404
    echo "CLAIMS-HOLD"
    """
    blocks = [*blocks[: events + 1], textwrap.dedent(claims), *blocks[events + 1 :]]
    # A reader runs a block, reads, and runs the next: by then the jobs of the last one ran. Between blocks the
    # script waits until Lethe is idle (no job in the outbox, no purge or scan waiting), never a fixed time.
    (tmp_path / "reader_pause.py").write_text(READER_PAUSE)
    checked = list(blocks)  # each block's example outputs, compared with what it printed
    blocks = [
        f"echo '{BLOCK_MARK}{number}'\n" + block + f"\npython3 {tmp_path / 'reader_pause.py'}\n"
        for number, block in enumerate(blocks)
    ]
    script = "set -euo pipefail\n" + "\n".join(blocks).replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
    }
    env["LETHE_DATABASE_URL"] = database_url
    dev = Role(["dev", "--port", str(port)], dict(env, **store_env), tmp_path / "dev.log", cwd=tmp_path)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", dev)
        result = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )
        assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}\n{dev.tail()}"
        # the folder a reader runs them from (their checkout) keeps nothing the blocks wrote
        assert {path.name for path in tmp_path.iterdir()} <= {".lethe", "dev.log", "reader_pause.py", "home"}, sorted(
            path.name for path in tmp_path.iterdir()
        )
        assert "409" in result.stdout  # deleteFile of an attached file
        assert "CLAIMS-HOLD" in result.stdout
        assert '"state":"complete"' in result.stdout.replace(" ", "")
        # The tus section (issue 25): the offset after the first PATCH, tuspy resuming at the server's offset,
        # and a terminated upload answering 410.
        assert "upload-offset: 9" in result.stdout.lower()
        assert "resuming at 1048576" in result.stdout and "\n204\n410\n" in result.stdout
        if driver == "s3":  # the direct upload: complete, and no URL for it afterwards
            assert "complete\n409\n" in result.stdout
        printed = dict(re.findall(rf"^{BLOCK_MARK}(\d+)\n(.*?)(?=^{BLOCK_MARK}|\Z)", result.stdout, re.M | re.S))
        for number, block in enumerate(checked):
            if driver == "fs" or block.startswith(S3_ONLY):  # the s3 run checks what only it runs
                for example in examples_of(block):
                    assert shown(example, printed.get(str(number), "")), (example, printed.get(str(number), ""))
    finally:
        dev.stop(signal.SIGTERM)
