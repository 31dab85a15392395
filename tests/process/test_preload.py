"""The worker pool's forkserver preload imports TensorFlow without loading Keras.

``import tensorflow`` loads Keras eagerly, and Keras loads matplotlib and
scikit-learn (simharness depends on both): about half of TF's import time,
paid by every forkserver, service and Ray actor, which run graphs only.
"""

from __future__ import annotations

import subprocess
import sys

PROGRAM = '''
import sys
import simharness._tf_preload
print(sorted(m for m in ('keras', 'matplotlib', 'sklearn') if m in sys.modules))
import tensorflow as tf
print(float(tf.constant(2.0) + 1.0))
print(tf.keras.layers.Dense(3).units)   # loaded on first use, as without the preload
import keras
print(keras.layers.Dense is tf.keras.layers.Dense)
'''


def test_the_forkserver_preload_runs_tensorflow_without_loading_keras():
    out = subprocess.run([sys.executable, '-c', PROGRAM], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split('\n')[:4] == ['[]', '3.0', '3', 'True'], out.stdout
