"""`import simharness` imports no JAX; TensorFlow's import (TF imports JAX where it is
installed, for TFLite's JAX converter) leaves it out too, in the driver as in workers;
``tff.jax`` loads it on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip('jax', reason='the JAX frontend needs JAX: pip install -e ".[jax]"')

CODE = """
import sys
import simharness as tff
print('after import simharness:', 'jax' in sys.modules, 'tensorflow' in sys.modules)
import tensorflow
print('after import tensorflow:', 'jax' in sys.modules)
import numpy as np

@tff.jax.computation(np.int32)
def inc(x):
    return x + 1

print('after tff.jax:', 'jax' in sys.modules, inc(1))
"""


def test_jax_is_imported_only_by_tff_jax():
    out = subprocess.run(
        [sys.executable, '-c', CODE], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [
        'after import simharness: False False',
        'after import tensorflow: False',
        'after tff.jax: True 2',
    ], out.stderr[-3000:]
