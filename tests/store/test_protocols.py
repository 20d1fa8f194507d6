"""The store's protocols (`workbench.readers`, `workbench.store.protocols`) say what the parts around the
store call on it: `Store` keeps every one of them, method by method, with the same parameters, so a
function typed against a protocol is typed against what the store really offers."""

from __future__ import annotations

import inspect

import pytest

from workbench.readers import RolloutReader, RunReader
from workbench.store import Store, open_store
from workbench.store.protocols import ControlStore, ImportStore, RunStore, RunWriter

PROTOCOLS = [RunReader, RolloutReader, RunWriter, ControlStore, RunStore, ImportStore]


def _methods(proto: type) -> list[str]:
    return sorted(n for k in proto.__mro__ if k.__name__ not in ("Protocol", "Generic", "object")
                  for n, v in vars(k).items() if callable(v) and not n.startswith("_"))


@pytest.mark.parametrize("proto", PROTOCOLS, ids=lambda p: p.__name__)
def test_the_store_keeps_each_protocol_with_the_same_parameters(proto):
    names = _methods(proto)
    assert names, f"{proto.__name__} declares no method"
    for name in names:
        want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(proto, name)).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(Store, name)).parameters.values()]
        assert got == want, f"Store.{name} differs from {proto.__name__}.{name}"


def test_an_open_store_is_an_instance_of_each(tmp_path):
    with open_store(tmp_path / "s") as st:
        assert all(isinstance(st, p) for p in PROTOCOLS)
        assert st.handle.folder() == (tmp_path / "s").absolute()  # RunStore's handle
    assert not isinstance(object(), RunReader)  # the check can fail
