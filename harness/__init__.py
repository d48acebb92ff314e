"""The process harness shared by the tests and the benchmarks: free ports,
real brokers, Prometheus and a one-node Slurm started from the machine's
binaries, scrapes parsed with ``prometheus_client.parser``, waits, and the
one place timing slack lives.  It is not part of the product: neither the
wheel nor the image carries it.
"""
