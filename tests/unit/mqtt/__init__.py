"""Tests of ``rainierd.mqtt``."""
