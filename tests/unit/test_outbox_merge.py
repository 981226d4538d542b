"""Purge jobs of several commits travel as one message (issue 11): the publisher merges them in order."""

from __future__ import annotations

from app.db.publisher import MERGE_LIMIT, merge_jobs
from app.db.uow import Job


def purge(outbox_id, *ids):
    return Job(outbox_id, "maintenance", "purge_objects", (list(ids),))


def test_purge_jobs_merge_and_other_jobs_keep_their_place():
    scan = Job(2, "scan", "scan_file", ("s",))
    merged = merge_jobs([purge(1, "a"), scan, purge(3, "b", "c"), purge(4, "d")])
    assert [(ids, job.actor_name, job.args) for ids, job in merged] == [
        ([1, 3, 4], "purge_objects", (["a", "b", "c", "d"],)),
        ([2], "scan_file", ("s",)),
    ]
    assert merged[0][1].outbox_id == 1  # the message id of the first row


def test_a_merged_message_holds_at_most_the_purge_batch():
    jobs = [purge(i, *[f"{i}-{n}" for n in range(300)]) for i in range(1, 5)]  # 1,200 ids
    merged = merge_jobs(jobs)
    assert [ids for ids, _ in merged] == [[1, 2, 3], [4]]
    assert all(len(job.args[0]) <= MERGE_LIMIT for _, job in merged)
