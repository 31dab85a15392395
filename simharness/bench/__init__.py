"""Performance tracking on top of pytest-benchmark's saved JSON: noise-aware comparison and history.

* `probe`: what the pytest plugin records next to each benchmark's rounds
  (the calibration workload's times, peak RSS of driver and workers, a
  fingerprint of the result).
* `results`: saved runs (pytest-benchmark JSON files) as `Run` / `Measurement`.
* `compare`: B/A per benchmark with a bootstrap interval, normalized by the
  machine's speed at the time, and a verdict with its probability.
* `changepoint`: steps in a per-commit series: a noise-weighted piecewise-constant
  fit (PELT, `ruptures`), each step then tested.
* `history`: runs per commit (git sha, dirty flag, machine fingerprint), a
  table and plots per benchmark across commits, with detected steps and their
  confirmation reruns.

``simharness bench run|ab|compare|history`` is the command line (`simharness.bench.cli`).
Nothing here imports TensorFlow.
"""

from simharness.bench.compare import (
    Comparison,
    compare_measurements,
    compare_runs,
    format_comparisons,
)
from simharness.bench.probe import fingerprint
from simharness.bench.results import Measurement, Run, find_runs, load_run, resolve_runs

__all__ = [
    'Comparison',
    'Measurement',
    'Run',
    'compare_measurements',
    'compare_runs',
    'find_runs',
    'fingerprint',
    'format_comparisons',
    'load_run',
    'resolve_runs',
]
