"""Tests of the project's deploy (outside the package)."""
