"""TensorFlow without its C++ start-up noise (driver, forkserver and workers).

Importing TensorFlow prints, before its logging is initialized (so
``TF_CPP_MIN_LOG_LEVEL`` cannot hide them), lines such as::

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 ... port.cc:153] oneDNN custom operations are on. ...
    I0000 ... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    E0000 ... cuda_platform.cc:52] failed call to cuInit: ... UNKNOWN ERROR (303)

and the CPU feature notice of the Python side. `quiet_stderr` catches what
is written to file descriptor 2 while a block runs (C++ writes there
directly), drops the lines that match `NOISE`, and writes every other line
back: a real error still shows. `import_tensorflow` sets
``TF_CPP_MIN_LOG_LEVEL=2`` (unless set) and imports TensorFlow inside it;
the worker pool's forkserver preloads `simharness._tf_preload`, which calls it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

#: Start-up lines that say nothing to a user of a CPU or GPU machine.
NOISE = re.compile(
    r'All log messages before absl::InitializeLog'
    r'|oneDNN custom operations are on'
    r'|Could not find cuda drivers'
    r'|failed call to cuInit'
    r'|Unable to register cu(DNN|FFT|BLAS) factory'
    r'|computation placer already registered'
    r'|TF-TRT Warning|Could not find TensorRT'
    r'|This TensorFlow binary is optimized to use available CPU instructions'
    r'|To enable the following instructions: .* rebuild TensorFlow'
    r'|cudart_stub\.cc'
    r'|Attempting to register factory for plugin')


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Within the block, fd 2 goes to a temporary file; afterwards, its lines
    that do not match `NOISE` are written to the real stderr."""
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (a daemon): nothing to filter
        yield
        return
    with tempfile.TemporaryFile(mode='w+b') as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (AttributeError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().decode('utf-8', 'replace').splitlines(True)
                    if line.strip() and not NOISE.search(line)]
            if kept:
                os.write(2, ''.join(kept).encode('utf-8'))


class _KerasNotNow:
    """A meta-path finder that lets ``import keras`` fail (ImportError) while installed.

    ``import tensorflow`` loads Keras eagerly (``keras.src.optimizers``, in a
    ``try/except ImportError``), and Keras loads matplotlib and scikit-learn
    where they are installed (simharness depends on both): about half of
    TensorFlow's import time. A worker process never needs Keras (it runs
    serialized graphs), so its forkserver imports TensorFlow with this finder
    in place. ``importlib.util.find_spec('keras')`` (TF reads Keras' directory
    from it) still finds Keras; only loading it fails. Once the finder is
    removed, ``tf.keras`` (a lazy loader) and ``import keras`` load it as usual.
    """

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != 'keras':
            return None
        import importlib.machinery  # pylint: disable=import-outside-toplevel
        spec = importlib.machinery.PathFinder.find_spec(name)
        if spec is not None:
            spec.loader = self  # type: ignore[assignment]
        return spec

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: object) -> None:
        raise ImportError('keras is not loaded in a simharness worker process (it runs graphs)')


def import_tensorflow(keras: bool = True) -> None:
    """Imports TensorFlow quietly; with ``keras=False`` (the worker pool's
    forkserver), without loading Keras (see `_KerasNotNow`)."""
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    if 'tensorflow' in sys.modules:
        return
    finder = None if keras or 'keras' in sys.modules else _KerasNotNow()
    if finder is not None:
        sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    try:
        with quiet_stderr():
            import tensorflow  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)  # type: ignore[arg-type]


def initialize_devices() -> None:
    """Driver only (never in the forkserver): CUDA probing quietly (the cuInit line)."""
    import_tensorflow()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with quiet_stderr():
        tf.config.list_physical_devices()

