"""A problem answer (RFC 9457, application/problem+json) as an exception."""

from __future__ import annotations

from typing import Any


class LetheError(Exception):
    """Lethe refused a request: `status`, its stable `code` (`invalid_request`, `not_found`, `conflict`, ...),
    the `reason` word that says which rule (`wrong_part_size`, `quota_exceeded`, ...), a `detail` for people,
    and the whole `problem` document."""

    def __init__(self, status: int, problem: dict[str, Any]):
        self.status = status
        self.problem = problem
        self.code: str = str(problem.get("code") or "")
        self.reason: str | None = problem.get("reason")
        self.detail: str | None = problem.get("detail")
        self.title: str = str(problem.get("title") or "")
        super().__init__(
            f"{status} {self.code}" + (f" ({self.reason})" if self.reason else "") + f": {self.detail or self.title}"
        )

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later: an outage (503, 504), a rate limit (429), an error of the
        server's (500). Not 501 (not configured) nor 502 (content_corrupt: its bytes will not heal)."""
        return self.status in (429, 500, 503, 504)
