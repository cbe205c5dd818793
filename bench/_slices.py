"""One side of a benchmark measured in alternating slices: its count, wall time and CPU."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Side:
    """One side's operations, wall time and CPU (this process; its child processes)."""

    count: int = 0
    wall: float = 0.0
    cpu_self: float = 0.0
    cpu_children: float = 0.0
    cpu_host: float = 0.0  # the whole host's, where a benchmark measures it

    @property
    def rate(self) -> float:
        return self.count / self.wall

    def ms(self, seconds: float) -> float:
        """``seconds`` (a total over the side) in milliseconds per operation."""
        return 1000 * seconds / max(self.count, 1)
