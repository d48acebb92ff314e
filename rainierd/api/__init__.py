"""The monitor's HTTP applications, each a handler the roles register on
the HTTP server (``rainierd.http``), which knows none of them:

- ``ReadApi`` (``read``): the JSON read API, ``/api/v1/...`` (docs/api.md,
  schema in docs/api.schema.json): the fleet, its sites, UltraServers, jobs
  and recent events, one module per endpoint family (``fleet``,
  ``ultraservers``, ``jobs``, ``events``);
- ``ActionsApi`` (``actions``): ``/api/v1/actions``, the remediation
  advisories (docs/actions.md);
- ``UltraServerProbe`` (``drilldown``): ``/probe?target=u<id>`` and
  ``/probe/targets``, one UltraServer's chips, links and ports as
  exposition text, and the UltraServers worth probing.

Both drill-downs, ``/probe`` and ``/api/v1/ultraservers/<id>``, read the
same live figures (``figures``).
"""

from __future__ import annotations

from rainierd.api._common import DEFAULT_LIMIT, MAX_LIMIT
from rainierd.api.actions import ActionsApi
from rainierd.api.drilldown import UltraServerProbe
from rainierd.api.read import DEFAULT_EVENTS, ReadApi

__all__ = ["DEFAULT_EVENTS", "DEFAULT_LIMIT", "MAX_LIMIT", "ActionsApi", "ReadApi", "UltraServerProbe"]
