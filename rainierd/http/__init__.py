"""The HTTP edge, knowing none of the applications it serves: a small
asyncio HTTP/1.1 server that anyone who can reach it cannot exhaust
(``server``), the route table the roles fill (``routes``: a handler takes a
``Get`` and returns a ``Reply``), its one frozen configuration
(``config``), TLS and basic auth from an exporter-toolkit web config
(``webconfig``, ``basicauth``), connection slots and descriptors (``slots``,
``descriptors``), strict request heads (``request``), the server's own
counters and metrics (``status``), and a small client (``client``).

No face re-exports: the client is imported by ``rainierd top`` and the
healthcheck, which need none of the server.
"""
