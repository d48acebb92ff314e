"""The HTTP edge: a small asyncio HTTP/1.1 server that anyone who can reach it cannot exhaust (TLS and basic
auth from an exporter-toolkit web config, connection slots, strict request parsing), and a small client."""
