"""The K1 guard implements every method of both storage ports (the normal path's ObjectStore and the
maintenance port), and refuses each inside a unit of work."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from app.errors import StoreCallInTransaction
from app.storage.base import ObjectStore, StoreMaintenance
from app.storage.guard import GuardedStore


def declared(port: type) -> dict[str, Any]:
    """The methods a port declares, its own and those of the capability protocols it takes in."""
    return {
        name: member
        for cls in reversed(port.__mro__)
        if cls.__module__ == "app.storage.base"
        for name, member in vars(cls).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


PORT_METHODS = sorted({name for port in (ObjectStore, StoreMaintenance) for name in declared(port)})


class Recording:
    driver = "fake"

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append(name)


def arguments(name):
    port = ObjectStore if name in declared(ObjectStore) else StoreMaintenance
    parameters = list(inspect.signature(declared(port)[name]).parameters.values())[1:]
    return [None for p in parameters if p.default is inspect.Parameter.empty]


def test_the_port_has_the_methods_the_guard_knows():
    assert len(PORT_METHODS) >= 14 and "delete_many" in PORT_METHODS and "abort_upload" in PORT_METHODS


@pytest.mark.parametrize("name", PORT_METHODS)
def test_every_port_method_is_guarded_and_delegates(name):
    inner = Recording()
    inside = GuardedStore(inner, lambda: True)
    assert name in vars(GuardedStore), f"GuardedStore does not implement {name} itself"
    with pytest.raises(StoreCallInTransaction):
        getattr(inside, name)(*arguments(name))
    assert inner.calls == []
    outside = GuardedStore(inner, lambda: False)
    getattr(outside, name)(*arguments(name))
    assert inner.calls == [name]
