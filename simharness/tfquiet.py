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

A user's program imports TensorFlow itself, or through simharness' own modules
at its first computation: ``import simharness`` installs `install_import_hook`,
a meta-path finder that runs the first ``import tensorflow`` of the process
(whoever makes it) inside `quiet_stderr` and then probes the devices quietly
(the cuInit line). A program that imported TensorFlow before simharness has
seen its import lines already (nothing can take them back; TensorFlow's
shared libraries write them while they load, whatever ``TF_CPP_MIN_LOG_LEVEL``
says); ``import simharness`` then still probes the devices quietly.

To see everything TensorFlow writes (nothing filtered, ``TF_CPP_MIN_LOG_LEVEL``
left as it is): ``SIMHARNESS_LOG_LEVEL=INFO`` (or ``DEBUG``). The lines dropped
are also logged, at DEBUG, to the ``simharness.tensorflow`` logger. The variable
also sets the level of the ``simharness`` logger (``ERROR``: no warnings).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import logging
import os
import re
import sys
import threading
from typing import Any, Iterator, Optional, Tuple

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
    r'|Attempting to register factory for plugin'
)


#: The environment variable that shows TensorFlow's logs again (``INFO``, ``DEBUG``) and sets
#: the level of the ``simharness`` logger: a `logging` level name or number.
LEVEL_ENV = 'SIMHARNESS_LOG_LEVEL'

#: Where the lines `quiet_stderr` drops are logged (DEBUG).
DROPPED_LOGGER = 'simharness.tensorflow'


def log_level() -> Optional[int]:
    """The level `LEVEL_ENV` names (``info``, ``DEBUG``, ``20``...), None when unset or not a
    level."""
    value = os.environ.get(LEVEL_ENV, '').strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    level = logging.getLevelName(value.upper())
    return level if isinstance(level, int) else None


def shows_tensorflow_logs() -> bool:
    """True when the user asked for TensorFlow's logs (`LEVEL_ENV` at INFO or below)."""
    level = log_level()
    return level is not None and level <= logging.INFO


def configure_logging() -> None:
    """At ``import simharness``: the ``simharness`` logger at the level `LEVEL_ENV` names (when
    set; nothing else is changed: handlers are the program's)."""
    level = log_level()
    if level is not None:
        logging.getLogger('simharness').setLevel(level)


#: How many `quiet_stderr` blocks are open (fd 2 is the process', and so is this count).
_DEPTH = 0


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Within the block, fd 2 goes to a temporary file; afterwards, its lines
    that do not match `NOISE` are written to the real stderr (and those that do are
    logged at DEBUG to `DROPPED_LOGGER`). With `shows_tensorflow_logs`, a no-op; inside
    another such block (TensorFlow's import inside `import_tensorflow`), too: the outer
    block filters (a record the inner one logged to a handler on stderr would otherwise
    come back to the outer one's file)."""
    global _DEPTH  # pylint: disable=global-statement
    if shows_tensorflow_logs() or _DEPTH:
        yield
        return
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (a daemon): nothing to filter
        yield
        return
    import tempfile  # pylint: disable=import-outside-toplevel  (not at import simharness)

    with tempfile.TemporaryFile(mode='w+b') as tmp:
        os.dup2(tmp.fileno(), 2)
        _DEPTH += 1
        try:
            yield
        finally:
            _DEPTH -= 1
            try:
                sys.stderr.flush()
            except (AttributeError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines = [
                line
                for line in tmp.read().decode('utf-8', 'replace').splitlines(True)
                if line.strip()
            ]
            kept = [line for line in lines if not NOISE.search(line)]
            if kept:
                os.write(2, ''.join(kept).encode('utf-8'))
            dropped = logging.getLogger(DROPPED_LOGGER)
            if len(kept) < len(lines) and dropped.isEnabledFor(logging.DEBUG):
                for line in lines:
                    if NOISE.search(line):
                        dropped.debug('%s', line.rstrip())


class _KerasNotNow:
    """A meta-path finder that lets ``import keras`` fail (ImportError) while installed.

    ``import tensorflow`` loads Keras eagerly (``keras.src.optimizers``, in a
    ``try/except ImportError``), and Keras loads matplotlib and scikit-learn
    where they are installed (simharness depends on matplotlib): about half of
    TensorFlow's import time. A worker process never needs Keras (it runs
    serialized graphs), so its forkserver imports TensorFlow with this finder
    in place. ``importlib.util.find_spec('keras')`` (TF reads Keras' directory
    from it) still finds Keras; only loading it fails. Once the finder is
    removed, ``tf.keras`` (a lazy loader) and ``import keras`` load it as usual.

    JAX too, where it is installed: TensorFlow imports it (``tensorflow.lite.python.util``,
    in a ``try/except ImportError``, for TFLite's JAX converter only), most of a second of
    CPU in every process. A worker runs a JAX computation as a TF graph (`simharness.jax`);
    the driver's TensorFlow import leaves JAX out too (`_without`), unless JAX is loaded
    already: ``tff.jax`` and ``import jax`` load it when asked (TFLite's
    ``experimental_from_jax`` then wants JAX imported before TensorFlow).
    """

    #: The top-level packages kept out of a worker's TensorFlow import.
    NAMES = ('keras', 'jax')

    def __init__(self, names: Tuple[str, ...] = NAMES) -> None:
        self.names = names
        # Only the thread importing TensorFlow is refused (another may import JAX meanwhile).
        self.thread = threading.get_ident()

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name not in self.names or threading.get_ident() != self.thread:
            return None
        import importlib.machinery  # pylint: disable=import-outside-toplevel

        spec = importlib.machinery.PathFinder.find_spec(name)
        if spec is not None:
            spec.loader = self  # type: ignore[assignment]
        return spec

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: object) -> None:
        name = getattr(module, '__name__', 'keras')
        raise ImportError(f'{name} is not loaded in a simharness worker process (it runs graphs)')


@contextlib.contextmanager
def _without(names: Tuple[str, ...]) -> Iterator[None]:
    """Within the block, the packages `names` that are not loaded yet fail to load
    (`_KerasNotNow`): what TensorFlow's import leaves out."""
    left_out = tuple(n for n in names if n not in sys.modules)
    finder = _KerasNotNow(left_out) if left_out else None
    if finder is not None:
        sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    try:
        yield
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)  # type: ignore[arg-type]


def quiet_runtime_logs() -> None:
    """TensorFlow's C++ INFO and WARNING lines after start-up too (e.g. tf.data's ``Local
    rendezvous is aborting ... OUT_OF_RANGE``): ``TF_CPP_MIN_LOG_LEVEL=2``, unless the user set
    it or asked for TensorFlow's logs. Read once, when TensorFlow loads."""
    if not shows_tensorflow_logs():
        os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


#: True while `import_tensorflow` imports: its caller probes the devices (or must not).
_EXPLICIT = False


def import_tensorflow(keras: bool = True) -> None:
    """Imports TensorFlow quietly; with ``keras=False`` (the worker pool's
    forkserver), without loading Keras (see `_KerasNotNow`). Probes no device (the
    forkserver must not: its children would inherit an initialized CUDA driver)."""
    global _EXPLICIT  # pylint: disable=global-statement
    quiet_runtime_logs()
    if 'tensorflow' in sys.modules:
        return
    explicit, _EXPLICIT = _EXPLICIT, True
    try:
        with _without(('jax',) if keras else _KerasNotNow.NAMES), quiet_stderr():
            import tensorflow  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
    finally:
        _EXPLICIT = explicit


def initialize_devices() -> None:
    """Driver only (never in the forkserver): CUDA probing quietly (the cuInit line)."""
    import_tensorflow()
    _probe_devices()


def _probe_devices() -> None:
    """Lists the physical devices inside `quiet_stderr`: TensorFlow initializes CUDA (or fails
    to: ``failed call to cuInit ... (303)`` on a machine without a GPU) once, now, instead of
    at the program's first op. The eager context is not started: thread counts and visible
    devices can still be set."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    with quiet_stderr():
        tf.config.list_physical_devices()


def _may_probe_devices() -> bool:
    """In the user's own process only (as `simharness.__getattr__`): not in a `multiprocessing`
    child, and not inside `import_tensorflow`, whose callers probe themselves or must not (the
    worker pool's forkserver: its children would inherit an initialized CUDA driver)."""
    if _EXPLICIT:
        return False
    import multiprocessing  # pylint: disable=import-outside-toplevel

    return multiprocessing.parent_process() is None


def _probe_devices_if_mine() -> None:
    """`_probe_devices` where `_may_probe_devices`; a probe that fails is left for TensorFlow to
    report at the program's first op, as it would without simharness."""
    if _may_probe_devices():
        try:
            _probe_devices()
        except Exception:  # pylint: disable=broad-except
            pass


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run inside `quiet_stderr`; afterwards the module carries its
    own loader again (``__loader__``, ``__spec__.loader``) and the hook is removed."""

    def __init__(self, loader: Any, hook: '_QuietTensorFlowImport') -> None:
        self.loader = loader
        self.hook = hook

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.loader
        if getattr(module, '__spec__', None) is not None:
            module.__spec__.loader = self.loader
        quiet_runtime_logs()
        with _without(('jax',)), quiet_stderr():
            self.loader.exec_module(module)
        self.hook.remove()
        _probe_devices_if_mine()


class _QuietTensorFlowImport:
    """A meta-path finder for the top-level ``tensorflow`` package only: the spec the other
    finders give, with its loader run quietly (`_QuietLoader`)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != 'tensorflow' or shows_tensorflow_logs():
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
            spec.loader = _QuietLoader(spec.loader, self)
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)  # type: ignore[arg-type]
        except ValueError:
            pass


def install_import_hook() -> None:
    """At ``import simharness``: TensorFlow's start-up lines filtered out of the process'
    stderr whoever imports it next (simharness' modules at the first computation, the user's
    ``import tensorflow``, Keras). When TensorFlow is loaded already, its import lines are
    out (nothing to do about them); the device probe (cuInit) is still made quiet here."""
    if shows_tensorflow_logs():
        return
    if 'tensorflow' in sys.modules:
        if hasattr(sys.modules['tensorflow'], 'config'):  # not a TF still loading
            _probe_devices_if_mine()
        return
    if not any(isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlowImport())  # type: ignore[arg-type]
