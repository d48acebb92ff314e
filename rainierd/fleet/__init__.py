"""The fleet's vocabulary, below everything that watches or simulates it: the
Trainium2 hardware figures, the numbering of sites, UltraServers, nodes, chips,
links and ports (topology), a real fleet's inventory and the neuron-ls reader
that builds one, a shard's view of the fleet, and the training step's pace.
It imports nothing of rainierd but ``errors`` and ``_types``.
"""
