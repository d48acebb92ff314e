"""Where the advisories go (docs/actions.md, "Where actions go"): each sink
reads only the policy's frozen ``ActionsView``.

- ``changes``: what changed between two consecutive views (the one diff the
  pushing sinks share);
- ``retained``: retained MQTT documents under ``rainier/v1/actions/…``;
- ``webhook``: CloudEvents 1.0 POSTs with retries and a bounded queue;
- ``nodecheck``: ``rainierd node-check``, a node-problem-detector plugin;
(The HTTP client the last two share with ``rainierd top`` is ``rainierd.http.client``.)

This package re-exports nothing: ``rainierd node-check`` must load only the
standard library and ``nodecheck`` to answer within its second, and an
import here would load the rest (structlog, aiomqtt, prometheus_client).
"""

__all__: list[str] = []
