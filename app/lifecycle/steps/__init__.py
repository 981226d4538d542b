"""The cleanup's steps, one module each, named for what they end; STEPS lists them once, in the order a run
takes them (D8). A letter is a step's label in metrics, logs and `lethe cleanup`, never its name in code.

To add a step: a module here with `step(run) -> CandidateStep | WholeStep`, and its place in STEPS.
"""

from __future__ import annotations

from app.lifecycle.steps import (
    backlog,
    catch_up,
    expired_sessions,
    failed_rows,
    gauges,
    message_tombstones,
    multipart_aborts,
    never_attached,
    old_receipts,
    pending_scans,
    pending_variants,
    rate_windows,
    running_erasures,
    store_copies,
    temporary_files,
    unkept_slot_files,
    untyped_files,
    webhooks,
)
from app.lifecycle.steps.base import CleanupPolicy, Run, Step, WholeStep

STEPS = (
    expired_sessions,  # a
    never_attached,  # b
    failed_rows,  # c
    catch_up,  # d
    temporary_files,  # e
    backlog,  # f
    old_receipts,  # g
    unkept_slot_files,  # h
    running_erasures,  # i
    pending_scans,  # j
    gauges,  # k
    message_tombstones,  # l
    multipart_aborts,  # m
    webhooks,  # n
    pending_variants,  # o
    untyped_files,  # p
    rate_windows,  # q
    store_copies,  # r
)


def steps_of(run: Run) -> list[Step]:
    """Every step of one run, in order."""
    return [module.step(run) for module in STEPS]


__all__ = ["STEPS", "CleanupPolicy", "Run", "Step", "WholeStep", "steps_of"]
