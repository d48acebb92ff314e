"""``rainierd top``: the fleet in a terminal (docs/top.md).

A Textual application that follows a monitor through its read API
(``/api/v1/``, docs/api.md), never through its internals: what it shows is
what any client of the monitor can see, with the same TLS and credentials.

- ``model``: the documents of one poll as a frozen ``View``, the link's health
  and the pure functions that turn them into text and colours (no Textual);
- ``heatmap``: the layout of every UltraServer as one cell, grouped by site
  (pure), and the scrolling widget that draws it;
- ``source``: where the documents come from (``HttpSource``: the monitor's
  HTTP server, gzip, bounded in time and size);
- ``names``: the canonical id of every entity (``s0/u1/n4/chip5/link0``), from
  either shape of the read API (pure);
- ``entity``: what the entity screen says: figures against nominal and peers,
  cost to each job, the node's advisory, the runbook anchor (pure);
- ``tables``: every table's filter (``/``) and sort (``<`` ``>`` ``I``);
- ``keys``: the help screen (``?``) and the filter line;
- ``screens``: the drill-down screens (site, UltraServer, node, entity, job);
- ``app``: the application: the fleet screen, the poll loop, the keys;
- ``launch``: ``rainierd top`` and ``rainierd run --top`` (which follows only
  its own child).

Textual is the optional extra ``rainierd[top]``: nothing outside this package
imports it.
"""

__all__: list[str] = []
