"""``benchmarks startup``: how long ``scripts/run`` (the README's first
command) takes to serve, warm and cold.

From the command's start to ``/healthz`` answering, and to the first
``/metrics`` with the fleet reporting (the first analysed tick).  *Warm*
runs ``scripts/run`` of this checkout, whose ``.venv`` is set up; *cold*
clones this checkout's HEAD into a fresh directory and runs its
``scripts/run`` there, which makes the venv and installs rainierd from the
package index first: what a user's first run costs.  Each run is stopped
with SIGINT and must exit 0.  The container's first healthy probe is
``scripts/container-test``'s to measure (it prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

from harness.procs import free_port

__all__ = ["HELP", "add_arguments", "bench_startup", "run"]

HELP: Final = "scripts/run to /healthz and to the first /metrics with the fleet reporting, warm and cold"

_ROOT: Final = Path(__file__).resolve().parent.parent
_POLL_S: Final = 0.05


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def _reporting(body: str | None) -> bool:
    for line in (body or "").splitlines():
        if line.startswith("rainier_fleet_chips_reporting "):
            return float(line.split()[1]) > 0
    return False


def start_once(checkout: Path, *, timeout_s: float) -> dict[str, float | int]:
    """Run ``checkout/scripts/run`` until its fleet reports; return the times to each milestone and its stop."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout's own venv, nothing else
    started = time.monotonic()
    proc = subprocess.Popen(["bash", str(checkout / "scripts" / "run"), "--metrics-addr", f"127.0.0.1:{port}"],
                            cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    healthz_s: float | None = None
    metrics_s: float | None = None
    try:
        while time.monotonic() - started < timeout_s and proc.poll() is None:
            if healthz_s is None and _get(f"http://127.0.0.1:{port}/healthz") is not None:
                healthz_s = time.monotonic() - started
            if _reporting(_get(f"http://127.0.0.1:{port}/metrics")):
                metrics_s = time.monotonic() - started
                break
            time.sleep(_POLL_S)
        if healthz_s is None or metrics_s is None:
            raise RuntimeError(f"scripts/run in {checkout} served no fleet within {timeout_s} s "
                               f"(exit {proc.poll()}): {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        stop_started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        return {"to_healthz_s": healthz_s, "to_first_metrics_s": metrics_s,
                "sigint_stop_s": time.monotonic() - stop_started, "exit_code": code}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _medians(runs: list[dict[str, float | int]]) -> dict[str, float]:
    return {key: statistics.median(float(r[key]) for r in runs) for key in ("to_healthz_s", "to_first_metrics_s",
                                                                             "sigint_stop_s")}


def bench_startup(*, repeat: int, cold: bool) -> dict[str, Any]:
    """Return warm runs (``repeat`` of them) and, with ``cold``, one run from a fresh clone."""
    report: dict[str, Any] = {"benchmark": "startup", "repeat": repeat}
    warm = [start_once(_ROOT, timeout_s=120) for _ in range(repeat)]
    report["warm"] = {"runs": warm, "median": _medians(warm)}
    if cold:
        workdir = Path(tempfile.mkdtemp(prefix="rainierd-cold-"))
        try:
            clone = workdir / "rainierd"
            subprocess.run(["git", "clone", "-q", str(_ROOT), str(clone)], check=True, timeout=120)
            first = start_once(clone, timeout_s=900)  # makes the venv and installs rainierd from the index
            second = start_once(clone, timeout_s=120)  # the same clone, its venv and bytecode now made
            report["cold"] = {"first_run": first, "second_run": second}
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` this benchmark's options."""
    parser.add_argument("--repeat", type=int, default=5, help="warm runs")
    parser.add_argument("--cold", action="store_true", help="also run once from a fresh clone (installs a venv)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print JSON or a few lines of text."""
    report = bench_startup(repeat=args.repeat, cold=args.cold)
    runs = [*report["warm"]["runs"], *report.get("cold", {}).values()]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        m = report["warm"]["median"]
        print(f"warm (median of {args.repeat}): /healthz {m['to_healthz_s']:.2f} s, first /metrics with the "
              f"fleet {m['to_first_metrics_s']:.2f} s, SIGINT stop {m['sigint_stop_s']:.2f} s")
        for name, r in report.get("cold", {}).items():
            print(f"cold, {name}: /healthz {r['to_healthz_s']:.2f} s, first /metrics {r['to_first_metrics_s']:.2f} s")
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1
