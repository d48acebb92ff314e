"""Tests of ``rainierd.core.ingest``."""
