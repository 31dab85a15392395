"""The worker pool's forkserver imports TensorFlow without loading Keras.

``import tensorflow`` loads Keras eagerly, and Keras loads matplotlib and
scikit-learn where installed (simharness depends on matplotlib): about half of TF's import time,
paid by every forkserver, service and Ray actor, which run graphs only. The
forkserver of a running pool must have none of their extension modules
mapped; Keras must still load where it is asked for (`tf.keras`).
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.process


def _mapped_paths(pid: int) -> set:
    with open(f'/proc/{pid}/maps') as f:
        return {line.split()[-1] for line in f if '/' in line}


def test_the_forkserver_has_tensorflow_but_not_keras_matplotlib_or_sklearn():
    import tensorflow as tf
    from multiprocess import forkserver
    import simharness as sh

    @sh.tf_computation(tf.float32)
    def double(x):
        return x * 2.0

    with sh.framework.process_executor_factory(num_workers=1, start=True) as factory:
        with sh.execution_context(factory):
            assert double(np.float32(2.0)) == 4.0
            pid = forkserver._forkserver._forkserver_pid
            assert pid, 'the pool started no forkserver'
            paths = _mapped_paths(pid)
    assert any('tensorflow' in p for p in paths), 'the forkserver did not preload TensorFlow'
    loaded = sorted({pkg for p in paths for pkg in ('/matplotlib/', '/sklearn/') if pkg in p})
    assert loaded == [], f'the forkserver loaded {loaded} (Keras and what it pulls in)'


def test_keras_loads_on_first_use_after_a_keras_free_import():
    """In-process check of the finder: removed after the import, Keras loads as usual."""
    import sys
    from simharness import tfquiet

    finder = tfquiet._KerasNotNow()
    spec = finder.find_spec('keras')
    assert spec is not None and spec.origin and spec.origin.endswith('__init__.py')
    with pytest.raises(ImportError, match='not loaded in a simharness worker'):
        finder.exec_module(None)
    assert finder.find_spec('numpy') is None
    assert finder not in sys.meta_path
