"""Whether the current thread runs inside a unit of work (the K1 guard and the outbox read it)."""

from __future__ import annotations

from contextvars import ContextVar, Token

_in_transaction: ContextVar[bool] = ContextVar("lethe_in_transaction", default=False)


def in_transaction() -> bool:
    """True while a unit of work is open in this thread (or task)."""
    return _in_transaction.get()


def set_in_transaction(value: bool) -> Token[bool]:
    """Mark this thread (context) as inside a unit of work; returns the token to reset it."""
    return _in_transaction.set(value)


def reset_in_transaction(token: Token[bool]) -> None:
    """Restore the in-transaction mark a set_in_transaction() token saved."""
    _in_transaction.reset(token)
