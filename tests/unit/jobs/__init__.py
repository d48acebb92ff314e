"""Tests of ``rainierd.jobs``."""
