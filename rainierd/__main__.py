"""``python -m rainierd``: the same command line as the ``rainierd`` script."""

from __future__ import annotations

from rainierd._start import entry

entry()
