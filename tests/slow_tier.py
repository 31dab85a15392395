"""The slow tier: tests the quick tier (``-m "not slow"``) leaves to the full suite.

A test is in it when it carries ``@pytest.mark.slow`` or its node id is listed in
`LIST` (``tests/slow_tests.txt``): the tests whose setup, call and teardown took
together at least `THRESHOLD_S` seconds in a full run on the reference 2-core
machine, or that the watch (`Watch`) named at the end of a quick-tier run. They
are ~6 % of the tests and ~75 % of the suite's time (whole CLI runs, signals and
killed drivers, Ray and gRPC faults, tutorials, benchmarks at their CI sizes);
without them a run takes about a quarter of the time, for iterating. CI and the
README's test command run the full suite (no ``-m``): all of them.

Regenerate the list from the outputs of a full run that printed every duration and,
optionally, of quick-tier runs (their watch's lines)::

    python -m pytest -q -n 2 --dist loadgroup --durations=0 > /tmp/durations.txt
    python -m pytest -q -n 2 --dist loadgroup -m "not slow" > /tmp/quick.txt
    python tests/slow_tier.py /tmp/durations.txt /tmp/quick.txt > tests/slow_tests.txt

The start of a session's resource (the Ray cluster, ~30 s here; the gRPC services) is
paid by whichever of its tests runs first: listing that test moves the cost to the
next one, so the first test of a group may stay named by the watch.
"""

from __future__ import annotations

import collections
import pathlib
import re
import sys
from typing import Dict, FrozenSet, Iterable

#: Seconds (setup + call + teardown) from which a test is in the slow tier.
THRESHOLD_S = 1.5

LIST = pathlib.Path(__file__).with_name('slow_tests.txt')

_DURATION = re.compile(r'^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*?)\s*$')
_WATCHED = re.compile(r'^\s+(\d+(?:\.\d+)?)s (tests/\S+)\s*$')  # `Watch`'s lines


def base_id(nodeid: str) -> str:
    """`nodeid` without pytest-xdist's ``@group`` suffix (``--dist loadgroup`` adds it)."""
    return re.sub(r'@[\w-]+$', '', nodeid)


def totals(lines: Iterable[str]) -> Dict[str, float]:
    """Seconds per test (its phases summed) from pytest's ``--durations`` lines and the
    watch's (`Watch`: a test's total)."""
    out: Dict[str, float] = collections.defaultdict(float)
    for line in lines:
        m = _DURATION.match(line)
        if m:
            out[base_id(m.group(3))] += float(m.group(1))
            continue
        m = _WATCHED.match(line)
        if m:
            out[base_id(m.group(2))] += float(m.group(1))
    return dict(out)


#: A test outside the slow tier that takes this long in a run is named at its end
#: (`Watch`): well over the threshold, so that the noise of a shared machine (+-30 %)
#: does not name the tests just under it.
WATCH_S = 4.0


class Watch:
    """Sums each test's phases as their reports arrive (in pytest-xdist's controller too)
    and names, at the end, the tests not in the slow tier that took `WATCH_S` or more: the
    quick tier's time cannot grow unseen."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = collections.defaultdict(float)
        self.slow: set = set()

    def add(self, nodeid: str, seconds: float, is_slow: bool) -> None:
        key = base_id(nodeid)
        self.seconds[key] += seconds
        if is_slow:
            self.slow.add(key)

    def over(self) -> list:
        return sorted(
            (k for k, v in self.seconds.items() if v >= WATCH_S and k not in self.slow),
            key=lambda k: -self.seconds[k],
        )


def listed(path: pathlib.Path = LIST) -> FrozenSet[str]:
    """The node ids of `path` (blank lines and ``#`` comments skipped)."""
    if not path.exists():
        return frozenset()
    return frozenset(
        s for s in (l.strip() for l in path.read_text().splitlines()) if s and not s.startswith('#')
    )


def main(argv: list) -> int:
    if len(argv) < 2:
        print(f'usage: python {argv[0]} PYTEST_OUTPUT... > {LIST.name}', file=sys.stderr)
        return 2
    seconds: Dict[str, float] = {}
    for path in argv[1:]:  # a test's time: the most any output gives it
        with open(path) as f:
            for k, v in totals(f).items():
                seconds[k] = max(v, seconds.get(k, 0.0))
    if not seconds:
        print(
            f'{" ".join(argv[1:])}: no duration lines (run pytest with --durations=0)',
            file=sys.stderr,
        )
        return 1
    slow = sorted(
        (k for k, v in seconds.items() if v >= THRESHOLD_S), key=lambda k: (-seconds[k], k)
    )
    print(
        f'# The slow tier (tests/slow_tier.py): setup + call + teardown >= {THRESHOLD_S:g} s in a '
        f'run; {len(slow)} of {len(seconds)} tests, '
        f'{sum(seconds[k] for k in slow):.0f} of {sum(seconds.values()):.0f} s.'
    )
    for k in slow:
        print(k)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
