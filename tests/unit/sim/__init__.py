"""Tests of ``rainierd.sim``."""
