"""Tests of ``rainierd.http``."""
