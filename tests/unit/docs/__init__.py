"""Tests of the project's docs (outside the package)."""
