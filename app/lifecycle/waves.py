# Prefix deletions are bounded in width (seed 002): keys go to the store in batch deletes of at most 1,000,
# with at most `concurrency` batches in flight, never one request per key all at once and never the whole
# listing in memory. A missing object is deleted (delete_many is idempotent), so a replay converges.
"""Delete listed keys in bounded waves (D16): the sweeps of unmanaged prefixes and the audit's --delete."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TypeVar

from app.storage.base import DeleteFailure

BATCH_KEYS = 1000  # the S3 DeleteObjects limit
T = TypeVar("T")


@dataclass
class WaveReport:
    deleted: int = 0
    failed: int = 0
    batches: int = 0


def delete_in_waves(
    delete: Callable[[Sequence[T]], list[DeleteFailure]],
    keys: Iterable[T],
    concurrency: int,
    batch_keys: int = BATCH_KEYS,
) -> WaveReport:
    """Delete `keys` (consumed lazily: keys, or keys with what their removal needs) in batches of at most
    batch_keys, at most `concurrency` in flight, each through `delete` (a removal of the file facade).

    Returns:
        Counts: keys deleted (or already gone), keys the store refused, batches sent.

    Raises:
        StorageError: the store as a whole failed; the batches in flight finish first, no new one starts.
    """
    report = WaveReport()
    in_flight: set[Future[tuple[int, list[DeleteFailure]]]] = set()

    def settle(done: set[Future[tuple[int, list[DeleteFailure]]]]) -> None:
        for future in done:
            sent, failures = future.result()  # a store-wide StorageError raises here
            report.failed += len(failures)
            report.deleted += sent - len(failures)

    def send(batch: list[T]) -> tuple[int, list[DeleteFailure]]:
        return len(batch), delete(batch)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="lethe-wave") as pool:

        def submit(batch: list[T]) -> None:
            nonlocal in_flight
            if len(in_flight) >= concurrency:  # the width bound: wait for one batch before the next
                done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                settle(done)
            in_flight.add(pool.submit(send, batch))
            report.batches += 1

        try:
            batch: list[T] = []
            for key in keys:
                batch.append(key)
                if len(batch) == batch_keys:
                    submit(batch)
                    batch = []
            if batch:
                submit(batch)
        finally:
            done, _ = wait(in_flight)  # nothing is left running behind the caller's back
        settle(done)
    return report
