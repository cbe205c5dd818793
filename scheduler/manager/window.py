"""The window of a dependent pipeline's shared queue (Zuul's rules).

Only the first ``window`` items of a queue are active: they merge and run
jobs; items beyond it wait. A window of 0 is unlimited and never changes.
An item reported at the head grows the window when it passed (and merged),
and shrinks it when it failed: ``linear`` adds or subtracts the factor,
``exponential`` multiplies or divides by it; it never drops below the floor
nor rises above the ceiling (None: no ceiling).
"""

from __future__ import annotations

from dataclasses import dataclass

LINEAR = "linear"
EXPONENTIAL = "exponential"


@dataclass(frozen=True)
class WindowSettings:
    """A pipeline's window settings; the defaults are Zuul's."""

    window: int = 20
    floor: int = 3
    ceiling: int | None = None
    increase_type: str = LINEAR
    increase_factor: int = 1
    decrease_type: str = EXPONENTIAL
    decrease_factor: int = 2

    def grow(self, current: int) -> int:
        """The window after an item passed at the head."""
        if current == 0:
            return 0
        if self.increase_type == EXPONENTIAL:
            grown = current * self.increase_factor
        else:
            grown = current + self.increase_factor
        return grown if self.ceiling is None else min(self.ceiling, grown)

    def shrink(self, current: int) -> int:
        """The window after an item failed at the head."""
        if current == 0:
            return 0
        if self.decrease_type == EXPONENTIAL:
            shrunk = current // max(self.decrease_factor, 1)
        else:
            shrunk = current - self.decrease_factor
        return max(self.floor, shrunk)


def in_window(window: int, position: int) -> bool:
    """Whether the item at ``position`` (0 = head) of a queue is active."""
    return window == 0 or position < window
