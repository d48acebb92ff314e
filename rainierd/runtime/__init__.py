"""What every rainierd process runs on, whatever its role: the lifecycle (one
stop event, one TaskGroup of named tasks), the tick schedule, the event loop's
lag and its histogram, the drop-oldest queue, structured logs and the episode
logger, the probes' verdicts, and the allocator's handling of freed memory.
It imports nothing of rainierd above ``_start``, ``errors`` and ``_types``.
"""
