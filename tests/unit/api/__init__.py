"""Tests of ``rainierd.api``."""
