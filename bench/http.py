"""HTTP benchmark of the api (issue 11). Not a test.

It starts `lethe api` as a real process with its defaults (api.workers 2, api.threads 4) on RabbitMQ and a
database of its own, seeds 40,000 complete, unattached files of one user, and drives it with wrk (2 threads,
32 connections, 10 s) on:

- GET /healthz
- GET /api/v1/files/{id} (an authenticated read, ids at random)
- DELETE /api/v1/files/{id} (deleteFile, a new id each request)
- with `--batch`: POST /api/v1/files/batch-delete (batchDeleteFiles, `--batch-size` new ids a request),
  reported in files/s beside deleteFile's
- with `--hot`, the other hot answers: a 1 MiB byte range of 4 MiB files on fs (getFileContent with Range),
  createUpload (a 1 MiB native upload, its rows and answer; again for a principal with a quota of its own,
  target within 10% of the one without), and a link's redirect (getLinkContent with file.s3.download
  redirect, on moto: the link opened, the row read, a URL presigned, 302)

With `--plain`, bench/plain.py's handlers doing the same durable work are measured in every round after the
tree's own, and the ratios printed (deleteFile's targets: at least 0.7 of the plain requests/s, a p99 at most
1.5x the plain one's).

Every file is seeded as an upload leaves it: complete, with two stored file.updated events (the
completion's and the scan's), which a delete redacts.

With `--before REF` the same run first measures the api of an earlier commit (a git worktree of REF, on the
same database schema, the same machine, the same minute), so the figures are side by side.

    python bench/http.py [--before REF] [--rounds N] [--batch [--batch-size 100]] [--files 40000]
                         [--duration 10] [--connections 32] [--tracing]

With `--tracing` the tree is measured a second time with tracing on (OTLP/HTTP to a sink in this process,
OTEL_TRACES_SAMPLER=always_on): deleteFile's target is at least 85% of its requests/s with tracing off.

Needs wrk (Debian: `apt-get install wrk`), PostgreSQL from DATABASE_URL (else an embedded server) and
RabbitMQ from BROKER_URL (default amqp://guest:guest@127.0.0.1:5672/); the api publishes into a RabbitMQ
vhost of its own when rabbitmqctl can make one (dropped at the end), else into the given vhost.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import (
    OWNER,
    ROOT,
    SECRET,
    bench_broker_url,
    bench_database,
    free_port,
    machine,
    make_runtime,
    make_store,
    moto_server,
    reset_tables,
    schema_for,
    seed,
    tree_of,
    wait_ready,
)

from app.entry.token import mint_token
from app.platform.links import Link, Sealer
from app.storage.fs import FsStore

LUA = r"""
local ids = {}
local i = 0
local token = os.getenv("BENCH_TOKEN")
local path = os.getenv("BENCH_IDS")
local method = os.getenv("BENCH_METHOD")
local suffix = os.getenv("BENCH_SUFFIX") or ""
local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local tokens = {}

function init(args)
  local many = os.getenv("BENCH_TOKENS")
  if many then for line in io.lines(many) do table.insert(tokens, line) end end
  local n = 0
  for line in io.lines(path) do
    if n % 2 == tid then table.insert(ids, line) end
    n = n + 1
  end
  if method ~= "DELETE" and method ~= "BATCH" then math.randomseed(os.time() + tid) end
end

function request()
  local id
  if method == "CREATE" then
    local bearer = token
    if #tokens > 0 then bearer = tokens[math.random(#tokens)] end
    return wrk.format("POST", "/api/v1/uploads", {["Authorization"] = "Bearer " .. bearer,
      ["Content-Type"] = "application/json"},
      '{"name": "bench.bin", "size_bytes": 1048576, "mime_type": "application/octet-stream"}')
  end
  if method == "RANGE" then
    return wrk.format("GET", "/api/v1/files/" .. ids[math.random(#ids)] .. "/content",
      {["Authorization"] = "Bearer " .. token, ["Range"] = "bytes=1048576-2097151"})
  end
  if method == "LINK" then
    return wrk.format("GET", "/api/v1/links/" .. ids[math.random(#ids)])
  end
  if method == "BATCH" then
    local batch = {}
    for k = 1, tonumber(os.getenv("BENCH_BATCH")) do
      i = i + 1
      table.insert(batch, '"' .. ids[((i - 1) % #ids) + 1] .. '"')
    end
    return wrk.format("POST", "/api/v1/files/batch-delete", {["Authorization"] = "Bearer " .. token,
      ["Content-Type"] = "application/json"}, '{"ids": [' .. table.concat(batch, ",") .. ']}')
  end
  if method == "GET" then
    id = ids[math.random(#ids)]
  else
    i = i + 1
    id = ids[((i - 1) % #ids) + 1]
  end
  return wrk.format(method, "/api/v1/files/" .. id .. suffix, {["Authorization"] = "Bearer " .. token})
end
"""

DONE_LUA = r"""
function done(summary, latency, requests)
  io.write(string.format("RESULT {\"requests\": %d, \"duration_us\": %d, \"p50_us\": %d, \"p99_us\": %d, " ..
    "\"non_2xx\": %d, \"socket_errors\": %d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout))
end
"""
LUA += DONE_LUA
HEALTH_LUA = DONE_LUA


def start_api(source: Path, env: dict, log_path: Path) -> subprocess.Popen:
    env = dict(env, PYTHONPATH=str(source))
    return subprocess.Popen(
        [sys.executable, "-m", "app.entry", "api"],
        cwd=source,
        env=env,
        stdout=open(log_path, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wrk(base: str, script: str, env: dict, args) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script)
    done = subprocess.run(
        ["wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{args.duration}s", "-s", lua.name, base],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        check=True,
    )
    os.unlink(lua.name)
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def start_plain(env: dict, port: int, log_path: Path, confirm: bool) -> subprocess.Popen:
    """The plain handlers (bench/plain.py) under gunicorn in the shape `lethe api` has."""
    plain_env = dict(
        env,
        PLAIN_CONFIRM="1" if confirm else "0",
        PYTHONPATH=str(ROOT),
        PLAIN_DATABASE_URL=env["LETHE_DATABASE_URL"],
        PLAIN_BROKER_URL=env["LETHE_BROKER_URL"],
        PLAIN_SECRET=SECRET,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "2", "-k", "gthread", "--threads", "4", "-b", f"127.0.0.1:{port}"]
        + ["--chdir", str(ROOT), "--log-level", "warning", "bench.plain:app"],
        env=plain_env,
        stdout=open(log_path, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def warm_up(base: str, token: str, ids_file: Path, args) -> None:
    """Two seconds of reads before a server is measured: its pools and caches filled, as a running api's are."""
    quick = argparse.Namespace(**{**vars(args), "duration": 2})
    wrk(base, LUA, {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file), "BENCH_METHOD": "GET"}, quick)


def measure_plain(url: str, broker_url: str, workdir: Path, args, confirm: bool) -> dict:
    """The same work on the plain stack (bench/plain.py), on files seeded as for `lethe api`."""
    schema_for(ROOT, url)
    objects = workdir / "objects-plain"
    store = FsStore(str(objects))
    rt = make_runtime(url, store)
    reset_tables(rt)
    ids = seed(rt, store, args.files, events=2, objects=False)
    batched = seed(rt, store, args.batch_files if args.batch and confirm else 0, events=2, objects=False)
    rt.close()
    port = free_port()
    env = {"PATH": os.environ["PATH"], "LETHE_DATABASE_URL": url, "LETHE_BROKER_URL": broker_url}
    proc = start_plain(env, port, workdir / "plain.log", confirm)
    base = f"http://127.0.0.1:{port}"
    ids_file = workdir / "ids-plain"
    try:
        wait_ready(base, proc, timeout=60, path="/nowhere", status=404)
        token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
        reads, deletes = ids[: args.files // 4], ids[args.files // 4 :]
        answers = {}
        ids_file.write_text("\n".join(str(i) for i in reads) + "\n")
        warm_up(base, token, ids_file, args)
        if confirm:  # (a read publishes nothing: once a round)
            answers["getFile (plain)"] = wrk(
                base, LUA, {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file), "BENCH_METHOD": "GET"}, args
            )
        ids_file.write_text("\n".join(str(i) for i in deletes) + "\n")
        result = wrk(base, LUA, {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file), "BENCH_METHOD": "DELETE"}, args)
        if result["requests"] > len(deletes):
            print("  note: plain: more deletes than ids; raise --files", file=sys.stderr)
        answers["deleteFile (plain)" if confirm else "deleteFile (plain, unconfirmed)"] = result
        if batched:
            ids_file.write_text("\n".join(str(i) for i in batched) + "\n")
            env = {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file), "BENCH_METHOD": "BATCH"}
            answers["batchDeleteFiles (plain)"] = wrk(base, LUA, dict(env, BENCH_BATCH=str(args.batch_size)), args)
            answers["batchDeleteFiles (plain)"]["files_per_request"] = args.batch_size
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
    return answers


HOT_FILES, HOT_SIZE = 64, 4 * 1024 * 1024  # 256 MiB on disk: the page cache holds it, as a busy api's would
LINK_FILES = 2_000
# The handlers' own speed: a benchmark sends more than a principal may (rate_limits.*); their counting is
# measured apart (createUpload, counted)
NO_RATE_LIMITS = {
    f"LETHE_RATE_LIMITS_{name.upper()}": "" for name in ("uploads", "completions", "links", "batch_deletes", "erasures")
}
QUOTA_OWNER = uuid.UUID("00000000-0000-4000-8000-00000000a0a0")  # createUpload under a quota of its own
LINK_SECRET = "bench-link-secret-of-sufficient-length-0123456789"


def serve(source: Path | None, env: dict, port: int, log_path: Path) -> tuple[subprocess.Popen, str]:
    """`lethe api` of `source` (None: the plain handlers) on `port`, ready."""
    if source is None:
        proc = start_plain(env, port, log_path, confirm=True)
        wait_ready(f"http://127.0.0.1:{port}", proc, timeout=60, path="/nowhere", status=404)
    else:
        proc = start_api(source, dict(env, LETHE_API_PORT=str(port)), log_path)
        wait_ready(f"http://127.0.0.1:{port}", proc, timeout=60)
    return proc, f"http://127.0.0.1:{port}"


def measure_hot(label: str, source: Path | None, url: str, broker_url: str, s3: str, workdir: Path, args) -> dict:
    """A 1 MiB range and createUpload on fs, then a link's redirect on S3, on `source`'s api (None: plain)."""
    name = (lambda endpoint: f"{endpoint} (plain)") if source is None else (lambda endpoint: endpoint)
    token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
    ids_file = workdir / f"ids-hot-{label}"
    results = {}
    objects = workdir / f"objects-hot-{label}"
    store = FsStore(str(objects))
    rt = make_runtime(url, store)
    reset_tables(rt)
    ids = seed(rt, store, HOT_FILES, size=HOT_SIZE)
    quotas = source is not None and rt.db.read(
        lambda conn: conn.execute("SELECT to_regclass('quotas') IS NOT NULL").fetchone()[0]
    )  # (an earlier tree's schema may have none)
    if quotas:  # a principal with a quota of its own, beside OWNER, who has none
        from app.db.quotas import set_quota

        limits = {"max_bytes": 10**15, "max_files": 10**9}
        rt.db.unit_of_work(lambda uow: set_quota(uow.conn, QUOTA_OWNER, limits, datetime.now(UTC)), name="bench")
    rt.close()
    env = {
        "PATH": os.environ["PATH"],
        "LETHE_DATABASE_URL": url,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_FS_ROOT": str(objects),
        "LETHE_LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": str(workdir / f"metrics-hot-{label}"),
        "PLAIN_FS_ROOT": str(objects),
        **NO_RATE_LIMITS,
    }
    proc, base = serve(source, env, free_port(), workdir / f"hot-{label}.log")
    try:
        ids_file.write_text("\n".join(str(i) for i in ids) + "\n")
        common = {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file)}
        warm_up(base, token, ids_file, args)
        results[name("1 MiB range")] = wrk(base, LUA, dict(common, BENCH_METHOD="RANGE"), args)
        results[name("createUpload")] = wrk(base, LUA, dict(common, BENCH_METHOD="CREATE"), args)
        if quotas:
            limited = mint_token(SECRET, QUOTA_OWNER, ("files:read", "files:write"))
            results["createUpload (quota)"] = wrk(
                base, LUA, dict(common, BENCH_TOKEN=limited, BENCH_METHOD="CREATE"), args
            )
        if quotas:  # the same with rate_limits.uploads counting every request (a limit never reached)
            counted, counted_base = serve(
                source,
                dict(
                    env,
                    LETHE_RATE_LIMITS_UPLOADS="100000000/1m",
                    PROMETHEUS_MULTIPROC_DIR=str(workdir / f"metrics-counted-{label}"),
                ),
                free_port(),
                workdir / f"hot-counted-{label}.log",
            )
            try:
                results["createUpload (rate counted)"] = wrk(
                    counted_base, LUA, dict(common, BENCH_METHOD="CREATE"), args
                )
            finally:
                os.killpg(counted.pid, 15)
                counted.wait(30)
        # Many principals at once (as an application's users are): no two requests wait on one's usage
        tokens = workdir / f"tokens-{label}"
        tokens.write_text("\n".join(mint_token(SECRET, uuid.uuid4(), ("files:write",)) for _ in range(64)) + "\n")
        results[name("createUpload, 64 principals")] = wrk(
            base, LUA, dict(common, BENCH_TOKENS=str(tokens), BENCH_METHOD="CREATE"), args
        )
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
    shutil.rmtree(objects, ignore_errors=True)
    # A link's redirect: S3 (moto) with file.s3.download redirect; the rows alone (presigning reads no object).
    s3_store = make_store("s3", s3, str(workdir))
    rt = make_runtime(url, s3_store, **{"file.fs.root": str(workdir / "fs-root")})  # (not the working directory's)
    reset_tables(rt)
    linked = seed(rt, s3_store, LINK_FILES, objects=False)
    rt.close()
    sealer, ends = Sealer(LINK_SECRET), datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    ids_file.write_text("\n".join(sealer.seal(Link(i, "attachment", ends, None)) for i in linked) + "\n")
    env.update(
        {
            "LETHE_FILE_STORAGE_DRIVER": "s3",
            "LETHE_FILE_S3_ENDPOINT": s3,
            "LETHE_FILE_S3_BUCKET": s3_store.bucket,
            "LETHE_FILE_S3_ACCESS_KEY": "testing",
            "LETHE_FILE_S3_SECRET_KEY": "testing",
            "LETHE_FILE_S3_REGION": "us-east-1",
            "LETHE_FILE_S3_SECURE": "false",
            "LETHE_FILE_S3_DOWNLOAD": "redirect",
            "LETHE_FILE_LINK_SECRET": LINK_SECRET,
            "PLAIN_S3_ENDPOINT": s3,
            "PLAIN_S3_BUCKET": s3_store.bucket,
            "PLAIN_LINK_SECRET": LINK_SECRET,
        }
    )
    proc, base = serve(source, env, free_port(), workdir / f"hot-link-{label}.log")
    try:
        redirect = urllib.request.build_opener(NoRedirect).open(
            f"{base}/api/v1/links/{ids_file.read_text().split()[0]}"
        )
        assert redirect.status == 302, redirect.status  # what wrk counts below is this answer
        quick = argparse.Namespace(**{**vars(args), "duration": 2})
        wrk(base, LUA, {"BENCH_IDS": str(ids_file), "BENCH_METHOD": "LINK"}, quick)
        results[name("link redirect")] = wrk(base, LUA, {"BENCH_IDS": str(ids_file), "BENCH_METHOD": "LINK"}, args)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
    return results


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def http_error_302(self, req, fp, code, msg, headers):  # the 302 itself is the answer measured
        return fp


@contextlib.contextmanager
def otlp_sink():
    """An OTLP/HTTP endpoint that takes every export and answers 200 (a collector elsewhere, as cheap as it gets
    here): what the traced api pays is its own spans, their export, and nothing of a backend."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def measure(
    label: str, source: Path, url: str, broker_url: str, workdir: Path, args, batch: bool, extra_env=None
) -> dict:
    schema_for(source, url)
    objects = workdir / f"objects-{label}"
    store = FsStore(str(objects))
    rt = make_runtime(url, store)
    reset_tables(rt)
    batch_files = args.batch_files if batch else 0
    ids = seed(rt, store, args.files, events=2)
    batched = seed(rt, store, batch_files, events=2, objects=False)  # no purge runs here: rows suffice
    rt.close()
    reads, deletes = ids[: args.files // 4], ids[args.files // 4 :]
    ids_file = workdir / f"ids-{label}"
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "LETHE_DATABASE_URL": url,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_FS_ROOT": str(objects),
        "LETHE_API_PORT": str(port),
        "LETHE_LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": str(workdir / f"metrics-{label}"),
        **NO_RATE_LIMITS,
        **(extra_env or {}),
    }
    proc = start_api(source, env, workdir / f"api-{label}.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, timeout=60)
        token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
        results = {"healthz": wrk(base + "/healthz", HEALTH_LUA, {}, args)}
        ids_file.write_text("\n".join(str(i) for i in reads) + "\n")
        warm_up(base, token, ids_file, args)
        results["getFile"] = wrk(
            base, LUA, {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file), "BENCH_METHOD": "GET"}, args
        )
        ids_file.write_text("\n".join(str(i) for i in deletes) + "\n")
        results["deleteFile"] = wrk(
            base, LUA, {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file), "BENCH_METHOD": "DELETE"}, args
        )
        if results["deleteFile"]["requests"] > len(deletes):
            print(f"  note: {label}: more deletes than ids; raise --files", file=sys.stderr)
        if batch:
            ids_file.write_text("\n".join(str(i) for i in batched) + "\n")
            results["batchDeleteFiles"] = wrk(
                base,
                LUA,
                {
                    "BENCH_TOKEN": token,
                    "BENCH_IDS": str(ids_file),
                    "BENCH_METHOD": "BATCH",
                    "BENCH_BATCH": str(args.batch_size),
                },
                args,
            )
            results["batchDeleteFiles"]["files_per_request"] = args.batch_size
            if results["batchDeleteFiles"]["requests"] * args.batch_size > len(batched):
                print(f"  note: {label}: more batch deletes than ids; raise --batch-files", file=sys.stderr)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="a git ref to measure first, side by side")
    parser.add_argument("--files", type=int, default=40_000)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="measure every tree this many times, alternating")
    parser.add_argument("--batch", action="store_true", help="measure batchDeleteFiles too (this tree only)")
    parser.add_argument(
        "--plain", action="store_true", help="measure the plain handlers too, every round (bench/plain.py)"
    )
    parser.add_argument(
        "--hot", action="store_true", help="measure a 1 MiB range, createUpload and a link's redirect too"
    )
    parser.add_argument("--batch-size", type=int, default=100, help="ids per batchDeleteFiles request")
    parser.add_argument(
        "--tracing", action="store_true", help="measure this tree again with OpenTelemetry on, every request sampled"
    )
    parser.add_argument("--batch-files", type=int, default=200_000, help="files seeded for the batch deletes")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-http-"))
    print(
        f"machine: {machine()}; wrk -t{args.threads} -c{args.connections} -d{args.duration}s; "
        f"{args.files:,} files of one user"
    )
    table = []
    try:
        with contextlib.ExitStack() as stack:
            sources = (
                [(f"before ({args.before})", stack.enter_context(tree_of(args.before, workdir)))] if args.before else []
            )
            sources.append(("after (this tree)", ROOT))
            traced = {}
            if args.tracing:  # the same tree again with every request traced and exported
                endpoint = stack.enter_context(otlp_sink())
                traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "always_on"}
                sources.append(("traced (this tree, every request sampled)", ROOT))
            url = stack.enter_context(bench_database())
            broker_url = stack.enter_context(bench_broker_url())
            s3 = stack.enter_context(moto_server()) if args.hot else ""
            for round_ in range(1, args.rounds + 1):  # the trees alternate: the machine's drift hits both
                for label, source in sources:
                    shown = f"{label}, round {round_}" if args.rounds > 1 else label
                    results = measure(
                        label.split()[0],
                        source,
                        url,
                        broker_url,
                        workdir,
                        args,
                        batch=args.batch and source == ROOT,
                        extra_env=traced if label.startswith("traced") else None,
                    )
                    if args.hot:
                        results.update(measure_hot(label.split()[0], source, url, broker_url, s3, workdir, args))
                    for name, result in results.items():
                        table.append((shown, name, result))
                if args.plain:
                    shown = f"plain, round {round_}" if args.rounds > 1 else "plain"
                    for confirm in (True, False):
                        for name, result in measure_plain(url, broker_url, workdir, args, confirm).items():
                            table.append((shown, name, result))
                    if args.hot:
                        for name, result in measure_hot("plain", None, url, broker_url, s3, workdir, args).items():
                            table.append((shown, name, result))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n| code | endpoint | requests/s | files/s | p50 | p99 | non-2xx | socket errors |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, name, r in table:
        files = (
            f"{r['rps'] * r['files_per_request']:,.0f}"
            if "files_per_request" in r
            else (f"{r['rps']:,.0f}" if name == "deleteFile" else "")
        )
        print(
            f"| {label} | {name} | {r['rps']:,.0f} | {files} | {r['p50_us'] / 1000:.1f} ms "
            f"| {r['p99_us'] / 1000:.1f} ms | {r['non_2xx']} | {r['socket_errors']} |"
        )
    for label in dict.fromkeys(label for label, _, _ in table):
        rows = {name: r for lab, name, r in table if lab == label}
        if "getFile" not in rows:
            continue
        get, delete = rows["getFile"], rows["deleteFile"]
        print(
            f"{label}: deleteFile / getFile requests/s = {delete['rps'] / get['rps']:.0%}; "
            f"p99 {delete['p99_us'] / get['p99_us']:.2f}x getFile's"
        )
        # The plain handler measured in the same round, right after this tree's run.
        same_round = label.rsplit(", round ", 1)[1] if ", round " in label else None
        for endpoint, which in (
            ("batchDeleteFiles", "batchDeleteFiles (plain)"),
            ("getFile", "getFile (plain)"),
            ("deleteFile", "deleteFile (plain)"),
            ("deleteFile", "deleteFile (plain, unconfirmed)"),
            ("1 MiB range", "1 MiB range (plain)"),
            ("createUpload", "createUpload (plain)"),
            ("link redirect", "link redirect (plain)"),
            ("createUpload, 64 principals", "createUpload, 64 principals (plain)"),
        ):
            plain = next(
                (
                    r
                    for lab, name, r in table
                    if name == which and (same_round is None or lab == f"plain, round {same_round}")
                ),
                None,
            )
            if plain is not None and endpoint in rows:
                mine = rows[endpoint]
                print(
                    f"{label}: {endpoint} / {which} requests/s = {mine['rps'] / plain['rps']:.2f}; "
                    f"p99 {mine['p99_us'] / plain['p99_us']:.2f}x its"
                    + (" (targets: >= 0.7, <= 1.5x)" if endpoint == "deleteFile" else "")
                )
        if "createUpload (rate counted)" in rows:
            on, off = rows["createUpload (rate counted)"], rows["createUpload"]
            print(f"{label}: createUpload with its rate counted / without requests/s = {on['rps'] / off['rps']:.2f}")
        if "createUpload (quota)" in rows:
            on, off = rows["createUpload (quota)"], rows["createUpload"]
            print(
                f"{label}: createUpload under a quota / without requests/s = {on['rps'] / off['rps']:.2f}; "
                f"p99 {on['p99_us'] / off['p99_us']:.2f}x (target: within 10%)"
            )
        if "batchDeleteFiles" in rows:
            batch = rows["batchDeleteFiles"]
            print(
                f"{label}: batchDeleteFiles files/s = {batch['rps'] * batch['files_per_request'] / delete['rps']:.1f}x "
                f"deleteFile's (target >= 10x)"
            )


if __name__ == "__main__":
    main()
