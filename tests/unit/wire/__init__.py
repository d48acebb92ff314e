"""Tests of ``rainierd.wire``."""
