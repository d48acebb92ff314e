"""Tests of ``rainierd.bridge``."""
