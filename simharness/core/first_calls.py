"""`FirstCall`: one thread makes a TF function's first call while the others wait for it.

TensorFlow sets a function up at its first call in a process (the graph runtime
instantiates and graph-optimizes it, XLA compiles it), and threads that call a function
for the first time at once each do that work: on this project's 2-core machine, four
client threads' first calls of a dataset's read function took 0.14-0.23 s together, one
first call and then three 0.09-0.12 s. A round's first client calls (one function for
every client of the cohort) are such calls; so are a pipeline's first reads.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

__all__ = ['FirstCall']

R = TypeVar('R')


class FirstCall:
    """Runs the first call of a function alone; later calls run side by side.

    A first call that raises leaves the function cold: the next caller makes its first
    call (alone) again.
    """

    __slots__ = ('_lock', '_warm')

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warm = False

    def __call__(self, call: Callable[[], R]) -> R:
        """`call()`, alone while no call of it has returned."""
        if self._warm:
            return call()
        with self._lock:
            if not self._warm:
                out = call()
                self._warm = True
                return out
        return call()
