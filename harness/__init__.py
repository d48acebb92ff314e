"""The process harness shared by the tests and the benchmarks: free ports,
real brokers, Prometheus and a one-node Slurm started from the machine's
binaries, scrapes parsed with ``prometheus_client.parser``, waits, and the
one place timing slack lives.  It is not part of the product: neither the
wheel nor the image carries it.

What a real Trainium2 node emits, written from AWS's public documentation and
the Linux EFA driver alone (never from rainierd's bridge or captured samples),
each output with its ground truth, for the bridge's tests and benchmarks:

- ``harness.neuron_monitor``: neuron-monitor's JSON report stream for one
  trn2.48xlarge (LNC 1 or 2, today's or the 2.21-era hardware info, per-group
  periods, runtimes coming and going), faults (utilisation collapse, low FLOP,
  ECC, execution errors, a device vanishing, a stall) and the documented or
  hostile shape variants a consumer must survive;
- ``harness.efa_sysfs``: the EFA driver's ``hw_counters`` and port state under
  a directory standing for /sys/class/infiniband, written atomically, with
  degraded and vanishing devices, renames, resets and a frozen keep-alive.
"""
