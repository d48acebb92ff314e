"""``python -m rainierd``: the same command line as the ``rainierd`` script."""

from __future__ import annotations

import sys

from rainierd.cli import main

sys.exit(main())
