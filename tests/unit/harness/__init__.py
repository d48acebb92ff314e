"""Tests of the project's harness (outside the package)."""
