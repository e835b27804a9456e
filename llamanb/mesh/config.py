"""Mesh settings: a small frozen value that every mesh function takes. No layer asks "is this a
Galaxy?": a layer asks the config which axis splits what.

    shape        (rows, cols) of devices; a Galaxy is (8, 4): 32 Wormhole chips
    head_axis    the axis whose devices split attention heads and the FFN's inner dimension
                 (QKV and W1/W3 columns, WO and W2 rows)                  -- axis 0 in the demo
    hidden_axis  the axis whose devices split the hidden dimension: the residual stream, the
                 rows of QKV and W1/W3, the columns of WO and W2          -- axis 1 in the demo
    topology     "line" (bidirectional chain) or "ring" (chain plus a wrap-around link) for every
                 collective
    num_links    Ethernet links used in parallel between two neighbours

The demo's prefill collectives then follow from the placement (tenstorrent/tt-metal,
models/demos/llama3_70b_galaxy, tt/llama_attention.py, tt/llama_mlp.py, tt/llama_ccl.py):
all-reduce over hidden_axis after QKV, all-reduce over head_axis after WO and after W2,
reduce-scatter over hidden_axis after W1 and after W3, all-gather over hidden_axis before W2, and
an all-gather over hidden_axis of each RMSNorm's statistics. Its decode differs (see
llamanb.mesh.cost.decode_ccl_plan): QKV is reduce-scattered over the hidden axis, which leaves 8 of
the 32 users on each column, and the attention outputs are all-gathered back before WO.

Which Galaxy: tt/model_config.py picks by the number of PCIe-attached chips. A 6U Galaxy (all 32
chips on PCIe; its mesh axes close into rings) runs ring collectives with 4 links per neighbour
(GALAXY_NUM_LINKS = 4, CCL_TOPOLOGY = Ring; the prefill ring collectives in llama_ccl.py
hard-code num_links = 4); a 4U Galaxy runs line collectives with 3 links. PERF.md's numbers are
6U runs (its vLLM commands use FABRIC_1D_RING), so GALAXY is the 6U.
"""

from __future__ import annotations

from dataclasses import dataclass

from llamanb.errors import LlamanbError

TOPOLOGIES = ("line", "ring")


@dataclass(frozen=True)
class MeshConfig:
    shape: tuple[int, int] = (8, 4)
    head_axis: int = 0
    hidden_axis: int = 1
    topology: str = "line"
    num_links: int = 1

    def __post_init__(self):
        s = self.shape
        if (not isinstance(s, tuple) or len(s) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in s)):
            raise LlamanbError(f"mesh shape must be two positive integers (rows, cols), got {s!r}")
        if s[0] * s[1] > 64:
            raise LlamanbError(f"mesh {s[0]}x{s[1]} has more than 64 devices")
        if {self.head_axis, self.hidden_axis} != {0, 1}:
            raise LlamanbError(f"head_axis and hidden_axis must be 0 and 1 in some order, got "
                               f"{self.head_axis}, {self.hidden_axis}")
        if self.topology not in TOPOLOGIES:
            raise LlamanbError(f"topology must be one of {TOPOLOGIES}, got {self.topology!r}")
        if not isinstance(self.num_links, int) or self.num_links < 1:
            raise LlamanbError(f"num_links must be a positive integer, got {self.num_links!r}")

    @property
    def n_devices(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def heads_split(self) -> int:
        """Devices along head_axis: each holds 1/heads_split of the heads and the FFN."""
        return self.shape[self.head_axis]

    @property
    def hidden_split(self) -> int:
        """Devices along hidden_axis: each holds 1/hidden_split of the residual stream."""
        return self.shape[self.hidden_axis]

    def label(self) -> str:
        return f"{self.shape[0]}x{self.shape[1]}"


# Tenstorrent Galaxy as the Llama 3 70B demo drives it: 8x4 Wormhole chips. The 6U wires both
# mesh axes into rings (4 links per neighbour); the older 4U is a line mesh (3 links).
GALAXY = MeshConfig(shape=(8, 4), head_axis=0, hidden_axis=1, topology="ring", num_links=4)
GALAXY_4U = MeshConfig(shape=(8, 4), head_axis=0, hidden_axis=1, topology="line", num_links=3)
