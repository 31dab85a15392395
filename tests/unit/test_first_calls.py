"""`FirstCall`: a function's first call runs alone, later ones side by side."""

from __future__ import annotations

import threading
import time

import pytest

from simharness.core.first_calls import FirstCall


class _Probe:
    """A call that records how many calls run at once."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.calls = 0

    def __call__(self) -> int:
        with self.lock:
            self.running += 1
            self.calls += 1
            self.most = max(self.most, self.running)
            n = self.calls
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return n


def _in_threads(first: FirstCall, probe: _Probe, n: int) -> list:
    out: list = []
    start = threading.Barrier(n)

    def run() -> None:
        start.wait()
        out.append(first(probe))

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    return out


def test_the_first_call_runs_alone_and_later_calls_together():
    first, probe = FirstCall(), _Probe(0.2)
    assert sorted(_in_threads(first, probe, 4)) == [1, 2, 3, 4]
    # the first call alone: the three others after it, side by side
    assert probe.most == 3
    probe.most = 0
    _in_threads(first, probe, 4)
    assert probe.most == 4  # warm: nobody waits


def test_a_first_call_that_raises_leaves_the_function_cold():
    first = FirstCall()
    with pytest.raises(ValueError, match='not yet'):
        first(lambda: (_ for _ in ()).throw(ValueError('not yet')))
    probe = _Probe(0.2)
    _in_threads(first, probe, 3)
    assert probe.calls == 3 and probe.most == 2  # again one first call alone
