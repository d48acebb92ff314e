"""Tests of ``rainierd.core.detect``."""
