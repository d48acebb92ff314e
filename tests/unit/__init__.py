"""Unit tests (the tier that starts no process), one folder a room of the house: tests/unit/<package>/
mirrors rainierd/<package>/; benchmarks/, harness/, deploy/ and docs/ for what lives beside the package."""
