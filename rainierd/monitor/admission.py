"""What the monitor's admission knows of the streams (``rainierd.admission``):
the core's sequence accounting as one analysis leaves it, made into a
``Confirmed`` in the analysis thread and handed to the inbox's admission on
the loop (``loop.py``).

The core numbers publishers; the view names them.  Naming 31,200 streams
costs a few milliseconds, so it is done only when a stream's publisher, or
the numbering, changed since the last view: about a millisecond at
``rainier`` a tick otherwise (the sample times and receive offsets, copied).
"""

from __future__ import annotations

import numpy as np

from rainierd.admission import Confirmed, StreamsView
from rainierd.core import Streams
from rainierd.core.ingest import Ingest


def confirmed_of(ingest: Ingest, previous: Confirmed | None = None) -> Confirmed:
    """Return whose frames each node's and site's topic carries as ``ingest`` last applied them, reusing
    ``previous``'s names where nothing changed."""
    accounting = ingest.accounting
    count = accounting.publisher_count
    names: list[str] | None = None

    def view(streams: Streams, before: StreamsView) -> StreamsView:
        nonlocal names
        index = streams.publisher
        key = before.key
        if isinstance(key, tuple) and key[0] == count and np.array_equal(key[1], index):
            publisher = before.publisher
        else:
            if names is None:
                names = accounting.publisher_names()
            publisher = tuple(names[i] if i >= 0 else None for i in index.tolist())
        return StreamsView.of(publisher, streams.t_s, streams.offset_s, before=before, key=(count, index.copy()))

    was = previous or Confirmed()
    return Confirmed.of(view(accounting.nodes, was.nodes), view(accounting.sites, was.sites), previous=previous,
                        lead_slack_s=accounting.nodes.lead_slack_s)
