"""Tests of ``rainierd.top``."""
