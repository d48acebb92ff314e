"""Tests of ``rainierd.monitor``."""
