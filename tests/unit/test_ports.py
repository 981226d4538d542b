"""The suite's free ports (tests/support/ports.py): outside the range the system gives outgoing connections, so
none of the suite's connections can take one between its check and the server's bind; never one somebody
listens on; never one port for two workers."""

from __future__ import annotations

import socket

import pytest

from tests.support import ports


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(ports, "_cursor", [])
    return ports


def test_ports_lie_below_the_range_of_outgoing_connections_and_are_free(fresh):
    low, _ = fresh._connection_range()
    handed = fresh.free_ports(20)
    assert len(set(handed)) == 20
    assert all(fresh.LOWEST <= port < low for port in handed)
    for port in handed:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # nobody holds it


def test_a_port_somebody_listens_on_is_skipped(fresh):
    fresh.free_port()
    walk = fresh._slice()
    assert walk is not None
    upcoming, after = (walk[(fresh._cursor[0] + step) % len(walk)] for step in (0, 1))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", upcoming))  # the next one this process would hand out
        taken.listen(1)
        assert fresh.free_port() == after


def test_each_worker_walks_a_slice_of_its_own(fresh, monkeypatch):
    slices = []
    for worker in ("", "gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(fresh._slice() or ()))
    assert all(slices) and all(a.isdisjoint(b) for n, a in enumerate(slices) for b in slices[n + 1 :])


def test_where_the_connection_range_leaves_no_room_the_system_picks(fresh, monkeypatch):
    monkeypatch.setattr(fresh, "_connection_range", lambda: (fresh.LOWEST + 50, 60999))
    assert fresh._slice() is None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", fresh.free_port()))
