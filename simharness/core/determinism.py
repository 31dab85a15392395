"""What is pinned so that a client computation gives the same bits on every stack.

::

    driver process                              worker process k
    --------------                              ----------------
    EagerTFExecutor() --> pin_tensorflow_threads()   pinning.plan_workers: intra_op_threads =
      (TF not initialized yet: intra-op = 1;          INTRA_OP_THREADS
       already initialized otherwise: warn once)   pinning.apply_placement --> TF intra-op = 1

The canonical reduction order (`simharness.core.reduction`) fixes how client
values are combined; this module fixes the other thing that can differ
between layouts: the number of threads ONE TF op may use. Several CPU
kernels split their work by that number and add the pieces in an order that
depends on it, so their results differ in the last bits from one thread count
to another (measured on TF 2.21, x86, oneDNN on): the filter gradient of
``Conv2D`` (``Conv2DBackpropFilter``: every count from 1 to 4 gives other
bits, with or without oneDNN), ``FusedBatchNorm``, and full reductions
(``reduce_sum`` / ``reduce_mean`` over ~1M elements differ at 3 threads).
``tf.config.experimental.enable_op_determinism()`` does not change any of
them (it makes each op repeatable for a given thread count, which CPU ops
already are), and neither does ``TF_ENABLE_ONEDNN_OPTS=0``.

The thread count of the driver's TF is the number of cores by default and a
worker's was its number of pinned cores, so the same computation gave
different bits on a thread stack, on 1 worker and on 2 workers. Every
process that runs client computations therefore runs each op on
`INTRA_OP_THREADS` = 1 thread: the only count that is the same for every
layout and every machine. Parallelism comes from running clients
side by side (worker processes, client threads), not from splitting one op.

TF's graph optimizer (Grappler) is off for the graphs simharness traces and
runs (`graph_call_options`), as in TFF's own runtime (its C++ session
provider sets ``disable_meta_optimizer``: TFF's sessions are short-lived, so
the optimizer's cost is rarely paid back). Measured here (TF 2.21, 2 cores):
the built-in FedAvg round of the reference workload ran as fast or faster
without it (93.7 / 96.8 ms against 105.6 / 117.6 ms, medians of two
alternating runs), and the first calls of 20 small training steps took 0.7 s
instead of 0.9-1.1 s (the optimizer's pass over each function on its first
call; a test suite pays it for most functions it runs), but a `tff.learning`
round over a Keras `VariableModel` ran 14 % slower (docs/guide/determinism.md).
A graph then runs as traced, in every process: the same op order and kernels on every stack. With
``SIMHARNESS_GRAPH_REWRITES=1`` in the environment of every process (the
driver and the workers: worker processes inherit the driver's), Grappler runs
as in plain TF; results may then differ in the last bits from runs without it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Any, Iterator, Optional

from simharness.errors import SimharnessValueError

#: TF intra-op threads of every process that runs client computations.
INTRA_OP_THREADS = 1


def _effective(configured: int) -> int:
    """The intra-op thread count TF uses for a configured value (0: TF's choice)."""
    if configured:
        return configured
    if hasattr(os, 'sched_getaffinity'):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pin_tensorflow_threads() -> bool:
    """Sets TF's intra-op threads of this process to `INTRA_OP_THREADS`, if still possible.

    Idempotent and cheap once pinned. TF accepts a thread count only before
    its first op (eager context initialization; tracing a gradient or a
    dataset counts). If this process already ran a TF op with another count,
    it leaves TF as it is and warns (a `RuntimeWarning`, which Python's
    default filter shows once) that computations run here -- thread stacks,
    the server side of process stacks -- may differ in the last bits from
    the same computations in worker processes.

    Returns:
        True when TF runs ops on `INTRA_OP_THREADS` threads in this process.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    configured = tf.config.threading.get_intra_op_parallelism_threads()
    if _effective(configured) == INTRA_OP_THREADS:
        return True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(INTRA_OP_THREADS)
        return True
    except RuntimeError:
        warnings.warn(
            f'TensorFlow ran its first op in this process with {_effective(configured)} intra-op '
            f'threads, before simharness could pin them to {INTRA_OP_THREADS}: computations run '
            f'in this process (thread stacks, the server side of process stacks) may differ in '
            f'the last bits from worker processes for convolutions, batch norm and large '
            f'reductions. To keep results bit-identical across stacks, call '
            f'tf.config.threading.set_intra_op_parallelism_threads({INTRA_OP_THREADS}) at the '
            f'start of the program, before any TF op (tracing a tf_computation that takes '
            f'gradients or builds a dataset runs TF).', RuntimeWarning, stacklevel=3)
        return False


#: Environment variable: ``1`` runs TF's graph optimizer on simharness' graphs (off by default).
GRAPH_REWRITES_ENV = 'SIMHARNESS_GRAPH_REWRITES'

_OPTIONS_LOCK = threading.Lock()
_CALL_OPTIONS: Optional[Any] = None  # FunctionCallOptions, built once per process


def graph_rewrites_enabled() -> bool:
    """Whether Grappler runs on simharness' graphs in this process (`GRAPH_REWRITES_ENV`)."""
    value = os.environ.get(GRAPH_REWRITES_ENV, '0').strip().lower()
    if value in ('', '0', 'false', 'no', 'off'):
        return False
    if value in ('1', 'true', 'yes', 'on'):
        return True
    raise SimharnessValueError(f'{GRAPH_REWRITES_ENV}={value!r}: expected 1 (run TF\'s graph '
                               f'optimizer on simharness\' graphs) or 0 (the default: graphs '
                               f'run as traced)')


def _call_options() -> Any:
    global _CALL_OPTIONS
    if _CALL_OPTIONS is None:
        from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
        pin_tensorflow_threads()  # the config records the thread counts: pin them first
        with _OPTIONS_LOCK:
            if _CALL_OPTIONS is None:
                config = context.context().config  # a copy
                config.allow_soft_placement = True  # TF's default for function calls
                rewrites = config.graph_options.rewrite_options
                rewrites.disable_meta_optimizer = not graph_rewrites_enabled()
                _CALL_OPTIONS = context.FunctionCallOptions(config_proto=config)
    return _CALL_OPTIONS


@contextlib.contextmanager
def graph_call_options() -> Iterator[None]:
    """Within: TF function calls of this thread run with simharness' options (no Grappler).

    Covers eager calls of functions and the call ops that tracing writes into
    a graph (they carry the options of the thread that traced them), so a
    graph traced inside runs with them in any process. The thread's own
    options are restored on exit: a user's functions outside keep TF's defaults.
    """
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    options = _call_options()
    local = context.context()._thread_local_data  # pylint: disable=protected-access
    before = local.function_call_options
    if before is options:
        yield
        return
    local.function_call_options = options
    try:
        yield
    finally:
        local.function_call_options = before
