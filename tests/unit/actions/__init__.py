"""Tests of ``rainierd.actions``."""
