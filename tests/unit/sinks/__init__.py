"""Tests of ``rainierd.sinks``."""
