"""rainierd's benchmarks, outside the product: run from a source checkout as
``python -m benchmarks <kind> [options]``.  Each benchmark module owns its
options (``add_arguments``) and its run (``run``), and prints a table or,
with ``--json``, one JSON document; benchmarks/README.md gives each one's
command and current figure, and benchmarks/results/ its current report (its
baseline; older reports are in git history).  Neither the wheel nor the image
carries them.
"""
