"""Tests of ``rainierd.admission``."""
