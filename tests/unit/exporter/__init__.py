"""Tests of ``rainierd.exporter``."""
