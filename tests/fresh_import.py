"""One fresh interpreter that imports simharness as a user does, shared by the tests of it.

Starting Python with TensorFlow and simharness.learning costs ~7 s of CPU
on the CI machine; two tests check different things of the same fresh
``import simharness`` (tests/conformance/test_tff_names_and_errors.py: its
subpackages are attributes; tests/integration/test_cli_friction.py: the
start-up prints no TensorFlow noise), so one subprocess does both, in an
order that keeps each check as strict as when it ran alone, and each test
asserts its own part. `fresh_import_run` runs it once per test process (the
two tests share an xdist group, so once per CI run).

The steps, in order:

1. ``import simharness`` (a plain import, nothing else of simharness before it),
   then check that its subpackages are attributes: prints ``subpackages ok``
   (or ``subpackages failed: ...`` and goes on);
2. ``simharness.learning``, ``import tensorflow`` and one op: prints ``tf 2``.

It runs without ``TF_CPP_MIN_LOG_LEVEL`` (TensorFlow's C++ start-up noise is
not silenced by the environment: simharness must keep it quiet); stderr is
kept whole for the quiet check.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

CODE = """
import simharness
try:
    assert simharness.learning.FedAvg
    assert simharness.framework.EagerTFExecutor
    assert simharness.templates.IterativeProcess
    assert simharness.structure.Struct is simharness.Struct
except Exception as e:
    print('subpackages failed:', repr(e), flush=True)
else:
    print('subpackages ok', flush=True)
import simharness as tff
tff.learning
import tensorflow as tf
print('tf', int(tf.constant(1) + 1), flush=True)
"""


@functools.lru_cache(maxsize=None)
def fresh_import_run() -> subprocess.CompletedProcess:
    """The subprocess's result (returncode, stdout, stderr), run once per test process."""
    env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
    return subprocess.run(
        [sys.executable, '-c', CODE],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
