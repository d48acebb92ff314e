"""Tests of ``rainierd.runtime``."""
