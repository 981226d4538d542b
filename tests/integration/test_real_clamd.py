"""Scans against a real clamd (issue 20, D17): Debian's clamav-daemon, offline, with one test signature (the
EICAR string) and StreamMaxLength 1M. Clean, infected, over the stream limit (clamd answers and closes while
Lethe still sends), and clamd cut off then back (a TCP proxy of our own)."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from app.content.clamd import ClamdUnavailable, Verdict, instream
from app.domain.keys import part_key
from tests.support.clamd import EICAR
from tests.support.helpers import keys_of
from tests.support.lethe import ALEX
from tests.support.proxy import TcpProxy
from tests.support.stores import versions_of

MiB = 1024 * 1024


def test_the_real_clamd_answers_clean_infected_and_its_size_limit(real_clamd):
    assert instream(real_clamd.address, [b"hello lethe"], 30) == Verdict("clean")
    assert instream(real_clamd.address, [EICAR], 30) == Verdict("infected")
    # 4 MiB against StreamMaxLength 1M: clamd answers and closes while we still send
    assert instream(real_clamd.address, [os.urandom(MiB) for _ in range(4)], 30) == Verdict("error", "size_limit")


@pytest.mark.one_store
def test_clean_and_infected_uploads(make_lethe, real_clamd):
    lethe = make_lethe(**{"scan.clamd_address": real_clamd.address})
    clean = lethe.upload(ALEX, b"nothing to see here")
    infected = lethe.upload(ALEX, EICAR)
    assert lethe.row(clean).scan_status == "clean" and lethe.row(infected).scan_status == "infected"
    lethe.run_jobs("purge_objects")
    assert versions_of(lethe.raw_store, keys_of(infected)) == []


@pytest.mark.one_store
def test_an_upload_over_the_stream_limit_ends_as_error_within_a_minute_with_its_objects_purged(make_lethe, real_clamd):
    """The issue's case: a 24 MiB upload against StreamMaxLength 1M (scan.max_size left at its default, 25MiB,
    clamd's own default): once it stayed pending forever, its object on disk and its name in its row."""
    lethe = make_lethe(**{"scan.clamd_address": real_clamd.address, "file.part_size": "8MiB"})
    started = time.monotonic()
    file_id = lethe.upload(ALEX, os.urandom(24 * MiB), name="holiday-video.mp4")
    assert lethe.row(file_id).scan_status == "error"
    lethe.run_jobs("purge_objects")
    assert time.monotonic() - started < 60
    file_uuid = uuid.UUID(file_id)
    assert versions_of(lethe.raw_store, keys_of(file_id) + [part_key(file_uuid, n) for n in (1, 2, 3)]) == []


@pytest.mark.one_store
def test_clamd_cut_off_is_an_outage_the_job_retries_and_then_the_scan_ends(make_lethe, real_clamd):
    host, port = real_clamd.address.rsplit(":", 1)
    proxy = TcpProxy(host, int(port)).start()
    try:
        lethe = make_lethe(**{"scan.clamd_address": proxy.address, "scan.timeout": "5s"})
        file_id = lethe.upload(ALEX, b"waiting for clamd", scan=False)
        (job,) = lethe.broker.take("scan_file")
        from workers.actors import ACTORS

        proxy.refuse()  # clamd stopped
        with pytest.raises(ClamdUnavailable):
            ACTORS["scan_file"].fn(lethe.rt, *job.args)
        assert lethe.row(file_id).scan_status == "pending"
        proxy.pass_()  # clamd back: the retry scans it
        ACTORS["scan_file"].fn(lethe.rt, *job.args)
        assert lethe.row(file_id).scan_status == "clean"
    finally:
        proxy.close()
