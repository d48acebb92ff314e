"""The runtime's face is lazy (PEP 562): every name it offers resolves to the object in its module, and asking
for one loads only that module, so a small command (``rainierd healthcheck``) stays small."""

from __future__ import annotations

import importlib
import sys

import pytest

import rainierd
from rainierd import runtime


def test_every_offered_name_is_its_module_s_object() -> None:
    """Each name of ``__all__`` has a home, and is the very object that home defines."""
    assert sorted(runtime.__all__) == sorted(runtime._HOMES)
    for name, home in runtime._HOMES.items():
        assert getattr(runtime, name) is getattr(importlib.import_module(f"rainierd.runtime.{home}"), name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = runtime.nothing  # type: ignore[attr-defined]


def test_a_verdict_does_not_load_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking the probes' verdict from the face loads the probes' module and no other of the runtime's (whose
    histogram and loop lag load numpy, whose logs load structlog): checked on a module table emptied of them."""
    loaded = {name for name in sys.modules if name.startswith("rainierd.runtime.")}
    for name in loaded:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "rainierd.runtime")
    monkeypatch.setattr(rainierd, "runtime", runtime)  # the re-import rebinds it; put the first one back after
    face = importlib.import_module("rainierd.runtime")
    _ = face.Verdict
    assert {name for name in sys.modules if name.startswith("rainierd.runtime.")} == {"rainierd.runtime.probes"}
