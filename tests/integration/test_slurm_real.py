"""The Slurm adapter against a real Slurm rather than a recorded sample:
Debian's slurm-wlm (22.05, ``openapi/v0.0.38``) as a one-node cluster on
loopback (harness/slurm.py, the ``slurm`` fixture), a job started with
``sbatch``, and the real ``squeue --json`` piped into ``rainierd jobs slurm``
exactly as docs/jobs.md shows it, on a real Mosquitto.  The later formats
(23.02's state flags, 23.11's number objects) are pinned by the recorded
samples in tests/data/ (tests/unit/jobs/test_adapters.py)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

from harness.procs import Broker
from harness.slurm import SlurmCluster
from harness.timing import within
from tests.helpers import published, retained_jobs

INVENTORY = Path(__file__).parents[1] / "data" / "inventory-two-sites.toml"


def squeue_into_adapter(slurm: SlurmCluster, broker: Broker) -> str:
    """Run ``squeue --json | rainierd jobs slurm --topology … --mqtt-url …`` through a real pipe; return the
    adapter's log, failing unless both exit 0."""
    squeue = subprocess.Popen([slurm.binaries["squeue"], "--json"], stdout=subprocess.PIPE, env=slurm.env)
    assert squeue.stdout is not None
    try:
        adapter = subprocess.run(
            [sys.executable, "-m", "rainierd", "jobs", "slurm", "--topology", str(INVENTORY),
             "--mqtt-url", broker.url, "--log-format", "json"],
            stdin=squeue.stdout, capture_output=True, timeout=within(60), check=False,
        )
    finally:
        squeue.stdout.close()  # the adapter holds its own copy; squeue must see EPIPE if the adapter died early
        squeue.wait(timeout=within(30))
    log = adapter.stdout.decode() + adapter.stderr.decode()
    assert (squeue.returncode, adapter.returncode) == (0, 0), f"squeue {squeue.returncode}, adapter:\n{log}"
    return log


def test_a_real_running_job_is_retained_and_removed_once_cancelled(slurm: SlurmCluster, mosquitto: Broker) -> None:
    """A job sbatch started is retained as ``<cluster>/<job id>`` with its user, its node under the
    inventory's name and the start Slurm gave it, while a held (PENDING) job is not; once scancel has ended it
    (squeue --json still lists it, CANCELLED), the next run removes its document."""
    before_s = int(time.time())
    job = slurm.run("sbatch", "--parsable", "--job-name=llm-pretrain-70b", "--output=/dev/null",
                    "--wrap", "sleep 300").strip()
    slurm.run("sbatch", "--parsable", "--hold", "--job-name=next-run", "--output=/dev/null", "--wrap", "sleep 300")
    slurm.wait_until(lambda: slurm.job_state(job) == "RUNNING", 20, f"Slurm job {job} to run")

    log = squeue_into_adapter(slurm, mosquitto)
    assert published(log) == {"published": 1, "removed": 0}
    jobs = retained_jobs(mosquitto)
    start_s = jobs.get(f"{slurm.cluster}/{job}", {}).get("start_s")
    assert jobs == {f"{slurm.cluster}/{job}": {
        "v": 1, "id": f"{slurm.cluster}/{job}", "name": "llm-pretrain-70b", "owner": pwd.getpwuid(os.geteuid())[0],
        "scheduler": "slurm", "source": "slurm", "nodes": [slurm.node], "ultraservers": [], "start_s": start_s}}
    assert isinstance(start_s, float)
    assert before_s <= start_s <= time.time()

    slurm.run("scancel", job)
    slurm.wait_until(lambda: slurm.job_state(job) == "CANCELLED", 20, f"Slurm job {job} to end")
    log = squeue_into_adapter(slurm, mosquitto)
    assert published(log) == {"published": 0, "removed": 1}
    assert retained_jobs(mosquitto) == {}
