"""Tests of ``rainierd.aggregate``."""
