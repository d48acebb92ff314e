"""Tests of the project's benchmarks (outside the package)."""
