"""Tests of ``rainierd.fleet``."""
