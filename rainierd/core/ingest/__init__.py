"""Admission of telemetry into the fleet state, one analysis window at a time.

A window is every message received since the last analysis.  ``admit``
decodes them and ``apply`` admits the frames with a fixed number of numpy
passes however many nodes they carry, through four seams, each its own module:

* ``_window``: the join.  The frames' headers and records become one set of
  columns (node frames and batches together; facility frames apart).
* ``_rules``: the one table of rejection rules, for every frame kind.  Every
  check runs over the whole window before anything changes, so a frame that
  is rejected changes nothing (docs/wire-format.md lists the reasons).  In
  order, each rejecting the whole frame: ``unknown_node``, ``topic_mismatch``,
  ``bad_header``, ``non_finite``, ``clock_skew`` (a sample time more than
  ``max_clock_skew_s`` from the monitor's clock at receipt), ``unknown_id``,
  ``duplicate_id``.
* ``_accounting``: per node stream (publisher, node) and site stream, the
  sequence rules of ``core/streams.py``: gaps (missing, then lost), late
  frames, restarts under the same id, new publishers, ``stale_seq`` and
  ``seq_jump``; the cumulative ``IngestStats``, and the checkpoint of both.
* ``_store``: the good records into the state's tables.

When one node has several frames in a window (the monitor caught up after a
backlog) they apply in arrival order, one "generation" at a time, so rates come
out between consecutive samples.
"""

from __future__ import annotations

from rainierd.core.ingest._accounting import COUNTERS, IngestStats
from rainierd.core.ingest._ingest import Ingest
from rainierd.core.ingest._rules import REASONS
from rainierd.core.ingest._values import FlushResult, Message, Received

__all__ = ["COUNTERS", "FRAME_REASONS", "FlushResult", "Ingest", "IngestStats", "Message", "Received"]

FRAME_REASONS = REASONS
"""Every reason the rules reject a frame for, in the order a frame is charged to the first it fails."""
