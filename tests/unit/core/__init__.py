"""Tests of ``rainierd.core``."""
