"""rainierd's benchmarks, outside the product: run from a source checkout as
``python -m benchmarks <kind> [options]``.  Each benchmark module owns its
options (``add_arguments``) and its run (``run``), and prints a table or,
with ``--json``, one JSON document; benchmarks/README.md describes the
fields and keeps the results.  Neither the wheel nor the image carries them.
"""
