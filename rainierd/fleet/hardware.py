"""Every Trainium2 hardware figure rainierd uses, in one place.

The figures come from the AWS Neuron documentation unless a comment says
otherwise.  Where a figure is a press estimate or derived by us, the comment
says so, and the code that uses it takes it from configuration with this value
as the default.  Nothing else in the package should spell a hardware number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Trainium2:
    """Public figures for one Trainium2 chip and the systems built from it."""

    # Chip (AWS Neuron docs: Trainium2 architecture).
    neuron_cores: int = 8
    hbm_bytes: int = 96 * 2**30
    hbm_bw_bytes_s: float = 2.9e12
    fp8_dense_flops: float = 1.299e15
    bf16_dense_flops: float = 667e12
    # The Neuron docs give sparse = 2x dense; the press quotes 4x (332 PF per
    # UltraServer).  Configurable; rainierd reports dense figures by default.
    sparsity_factor: float = 2.0

    # No official TDP exists.  ~500 W per chip is a press estimate.
    chip_power_w: float = 500.0
    # Assumption (no public figure): idle draw of a chip in a running job.
    chip_idle_power_w: float = 150.0
    # Assumption: host CPUs, NICs and fans of one trn2.48xlarge node.
    node_host_power_w: float = 2_000.0

    # trn2.48xlarge: 16 chips on a 4x4 2D NeuronLink-v3 torus.
    chips_per_node: int = 16
    node_torus_x: int = 4
    node_torus_y: int = 4
    # Trn2 UltraServer: 4 nodes = 64 chips, a ring of 4 across the nodes.
    nodes_per_ultraserver: int = 4

    # NeuronLink-v3: 1.28 TB/s per chip.  1,024 GB/s inside the node over 4
    # torus neighbours gives 256 GB/s a link (derived).  256 GB/s to the chips
    # with the same coordinates in the other nodes, over the 2 ring neighbours,
    # gives 128 GB/s a ring link (derived).
    neuronlink_intra_bytes_s: float = 256e9
    neuronlink_ring_bytes_s: float = 128e9
    # Assumption: lanes per NeuronLink (not documented); lane degradation is
    # modelled in steps of 1/8 (87.5 %, 75 %, 50 %, 25 %).
    neuronlink_lanes: int = 8

    # EFA v3: 3,200 Gbps per node, most likely 16 x 200 Gbps, one EFA device a
    # chip (inferred, not documented).
    efa_ports_per_node: int = 16
    efa_port_bytes_s: float = 200e9 / 8

    @property
    def fp8_sparse_flops(self) -> float:
        """Return the sparse FP8 peak of one chip under the configured factor."""
        return self.fp8_dense_flops * self.sparsity_factor

    @property
    def chips_per_ultraserver(self) -> int:
        """Return the number of chips in one UltraServer (64)."""
        return self.chips_per_node * self.nodes_per_ultraserver


TRN2: Final = Trainium2()
