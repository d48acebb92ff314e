"""A throwaway one-node Slurm cluster on loopback: munged, slurmctld and
slurmd from Debian's slurm-wlm packages, as root, with their own key,
sockets, ports, state and logs in one temporary directory, so the Slurm
adapter can read a real ``squeue --json`` rather than only recorded samples.

The node may have any name (``slurmd -N``): the tests give it an inventory
hostname, so the job documents name a node the inventory knows whatever this
machine is called.  No plugin here uses cgroups (``proctrack/linuxproc``,
``task/none``, no accounting); it was written on a cgroup v1 machine and is
not yet run on v2.

Every daemon runs in the foreground as a child of the caller, which stops
it by its own process id; jobs still running are cancelled first, so no
``slurmstepd`` (which slurmd does not wait for) outlives the cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from harness.procs import free_port, require_binary
from harness.timing import within
from harness.waits import poll_until

__all__ = ["SlurmCluster"]

# Where each program comes from (Debian 12): the daemons and the clients the tests run.
_PACKAGES = {"munged": "munge", "mungekey": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd",
             "sbatch": "slurm-client", "squeue": "slurm-client", "scancel": "slurm-client", "sinfo": "slurm-client"}

_CONF = """\
# A one-node Slurm for one test (harness/slurm.py): loopback only, no cgroups, no accounting.
ClusterName={cluster}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
PlugStackConfig={dir}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
FirstJobId={first_job_id}
NodeName={node} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={cpus} State=UNKNOWN
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """A one-node Slurm cluster: ``node`` with ``cpus`` CPUs in partition ``partition`` of cluster ``cluster``.

    Raises MissingBinaryError (naming the Debian package) when a program is
    missing, PermissionError when not root (slurmd starts every job as its
    user, and munged must own its key).
    """

    def __init__(self, *, node: str, cluster: str = "trn-test", partition: str = "trn2", cpus: int = 2,
                 first_job_id: int = 1) -> None:
        self.binaries = {name: require_binary(name, package=package, also=[f"/usr/sbin/{name}"])
                         for name, package in _PACKAGES.items()}
        if os.geteuid() != 0:
            raise PermissionError("a Slurm cluster needs root: slurmd starts each job as its user")
        self.node, self.cluster, self.partition = node, cluster, partition
        # munged refuses a socket whose every parent directory is not executable by all, and pytest's tmp_path
        # sits under a 0700 directory; a short path also keeps the socket within the 108 bytes a Unix socket has.
        self.dir = Path(tempfile.mkdtemp(prefix="rainierd-slurm-"))
        self.dir.chmod(0o755)
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir()
        (self.dir / "plugstack.conf").touch()
        self.conf = self.dir / "slurm.conf"
        self.conf.write_text(_CONF.format(
            cluster=cluster, partition=partition, node=node, cpus=cpus, first_job_id=first_job_id,
            ctld_port=free_port(), slurmd_port=free_port(), dir=self.dir))
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._output: IO[bytes] = (self.dir / "daemons.out").open("ab")

    def _start(self, *args: str) -> None:
        self._procs.append(subprocess.Popen(args, stdout=self._output, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env, cwd=self.dir))

    def start(self) -> None:
        """Start munged, slurmctld and slurmd; return once the node is idle (AssertionError after 30 s)."""
        key = self.dir / "munge.key"
        subprocess.run([self.binaries["mungekey"], "--create", f"--keyfile={key}"], check=True, capture_output=True)
        self._start(self.binaries["munged"], "--foreground", f"--key-file={key}", f"--socket={self.dir}/munge.socket",
                    f"--pid-file={self.dir}/munged.pid", f"--log-file={self.dir}/munged.log",
                    f"--seed-file={self.dir}/munged.seed")
        self.wait_until((self.dir / "munge.socket").exists, 10, "munged's socket")
        self._start(self.binaries["slurmctld"], "-D", "-f", str(self.conf))
        self._start(self.binaries["slurmd"], "-D", "-f", str(self.conf), "-N", self.node)
        self.wait_until(lambda: self.node_state() == "idle", 30, f"Slurm node {self.node} to be idle")

    def _exited(self) -> bool:
        return any(proc.poll() is not None for proc in self._procs)

    def wait_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll ``condition`` until true (harness.waits.poll_until); fail with the daemons' logs, at once when
        one of them has exited."""
        try:
            poll_until(lambda: self._exited() or condition(), timeout_s, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None
        if self._exited():
            raise AssertionError(f"a Slurm daemon exited while waiting for {what}\n{self.logs()}")

    def run(self, program: str, *args: str) -> str:
        """Run Slurm client ``program`` (sbatch, squeue, scancel, sinfo) against this cluster; return its stdout.

        Raises AssertionError, with its stderr and the daemons' logs, when it fails.
        """
        done = subprocess.run([self.binaries[program], *args], capture_output=True, env=self.env, cwd=self.dir,
                              timeout=within(30), check=False)
        if done.returncode != 0:
            raise AssertionError(f"{program} {' '.join(args)} exited {done.returncode}: "
                                 f"{done.stderr.decode(errors='replace')}\n{self.logs()}")
        return done.stdout.decode()

    def node_state(self) -> str:
        """Return the node's state as sinfo prints it (``idle``, ``alloc``, ``mix``, ``down*``, ...), '' if none."""
        done = subprocess.run([self.binaries["sinfo"], "-h", "-n", self.node, "-o", "%T"], capture_output=True,
                              env=self.env, timeout=within(30), check=False)
        return done.stdout.decode().strip() if done.returncode == 0 else ""

    def job_state(self, job_id: str) -> str:
        """Return job ``job_id``'s state as squeue prints it (``RUNNING``, ``PENDING``, ...), '' once it is gone."""
        return self.run("squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T").strip()

    def logs(self) -> str:
        """Return the tail of each daemon's log, for a failure message."""
        parts = []
        for name in ("daemons.out", "munged.log", "slurmctld.log", "slurmd.log"):
            path = self.dir / name
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job still holding the node, then stop slurmd, slurmctld and munged, and remove the
        cluster's directory."""
        try:
            if all(proc.poll() is None for proc in self._procs) and len(self._procs) == 3:
                jobs = self.run("squeue", "-h", "-o", "%i").split()
                if jobs:
                    self.run("scancel", *jobs)
                # A cancelled job is COMPLETING until its slurmstepd has ended, which slurmd would not wait for.
                self.wait_until(lambda: not self.run("squeue", "-h", "-t", "R,CG,S", "-o", "%i").strip(), 30,
                                "the cancelled jobs' steps to end")
        finally:
            for proc in reversed(self._procs):  # slurmd, slurmctld, then munged, which both use
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=within(10))
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            self._output.close()
            shutil.rmtree(self.dir, ignore_errors=True)

