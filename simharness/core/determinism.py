"""What is pinned so that a client computation gives the same bits on every stack.

::

    driver process                              worker process k
    --------------                              ----------------
    import simharness --> configure_threads()    pinning.plan_workers: intra_op_threads =
      (TF_NUM_INTRAOP_THREADS=1 unless set)          INTRA_OP_THREADS
    EagerTFExecutor() --> pin_tensorflow_threads() pinning.apply_placement --> TF intra-op = 1
      (TF not initialized yet: intra-op = 1;
       already initialized otherwise: one
       warning line, once per process)

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
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Optional

_LOG = logging.getLogger(__name__)

#: TF intra-op threads of every process that runs client computations.
INTRA_OP_THREADS = 1


#: The variable TF's runtime reads for its intra-op thread count when its context starts
#: (and no count was configured): set by `configure_threads` at ``import simharness``.
THREADS_ENV = 'TF_NUM_INTRAOP_THREADS'


def configure_threads() -> None:
    """Sets ``TF_NUM_INTRAOP_THREADS`` to `INTRA_OP_THREADS` unless the user set it.

    Called at ``import simharness``. TF reads the variable when its eager
    context starts, at the first op of the process, so a program that imports
    simharness and then builds datasets, Keras models or traces gradients gets
    the pinned count before any of them runs: the client computations the
    driver runs (thread stacks) give the bits of the workers' with no
    warning. A program that ran a TF op before importing simharness keeps
    TF's default (`pin_tensorflow_threads` then warns once): when TF is loaded
    already, this finds out whether its context started, and with how many
    threads (`_started_with`), before the variable changes.
    """
    global _STARTED_WITH  # pylint: disable=global-statement
    tf = sys.modules.get('tensorflow')
    if tf is not None and _STARTED_WITH is None:
        _STARTED_WITH = _started_with(tf)
    os.environ.setdefault(THREADS_ENV, str(INTRA_OP_THREADS))


#: TF's intra-op thread count in this process when its context had started before
#: `configure_threads` (``import simharness``); None when it had not (or TF was not loaded).
_STARTED_WITH: Optional[int] = None


def _started_with(tf: Any) -> Optional[int]:
    """The thread count of a loaded TF whose context has started, None if it has not.

    TF refuses a new count once started; before, setting the count it will start with anyway
    (the user's ``TF_NUM_INTRAOP_THREADS``, else `INTRA_OP_THREADS`, which `configure_threads`
    puts in the variable) changes nothing. Read before the variable is set: TF read it (or its
    absence: one thread per core) when it started."""
    threading_ = getattr(getattr(tf, 'config', None), 'threading', None)
    if threading_ is None:  # a TF still loading (this import made from inside TF's own)
        return None
    configured = threading_.get_intra_op_parallelism_threads()
    env = os.environ.get(THREADS_ENV, '').strip()
    planned = configured or (int(env) if env.isdigit() and int(env) > 0 else INTRA_OP_THREADS)
    try:
        threading_.set_intra_op_parallelism_threads(planned)
    except RuntimeError:
        return _effective(configured)
    return None


def _effective(configured: int) -> int:
    """The intra-op thread count TF uses for a configured value (0: TF's choice, or
    ``TF_NUM_INTRAOP_THREADS`` when set to a positive count)."""
    if configured:
        return configured
    env = os.environ.get(THREADS_ENV, '').strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if hasattr(os, 'sched_getaffinity'):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pin_tensorflow_threads() -> bool:
    """Sets TF's intra-op threads of this process to `INTRA_OP_THREADS`, if still possible.

    Idempotent and cheap once pinned. TF accepts a thread count only before
    its first op (eager context initialization; tracing a gradient or a
    dataset counts). If this process already ran a TF op with another count,
    it leaves TF as it is and says once per process, in one line on the
    ``simharness`` logger (WARNING), that computations run here -- thread
    stacks, the server side of process stacks -- may differ in the last bits
    from the same computations in worker processes, and what to do.

    Returns:
        True when TF runs ops on `INTRA_OP_THREADS` threads in this process.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    configured = tf.config.threading.get_intra_op_parallelism_threads()
    # TF started before import simharness: the variable set since is not TF's count.
    count = (
        _STARTED_WITH if _STARTED_WITH is not None and not configured else _effective(configured)
    )
    if count == INTRA_OP_THREADS:
        return True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(INTRA_OP_THREADS)
        return True
    except RuntimeError:
        _warn_once(count, before_import=_STARTED_WITH is not None and not configured)
        return False


_WARN_LOCK = threading.Lock()
_WARNED = False


def _warn_once(count: int, before_import: bool) -> None:
    """The one line `pin_tensorflow_threads` says, once per process: why, and what to do."""
    global _WARNED  # pylint: disable=global-statement
    with _WARN_LOCK:
        if _WARNED:
            return
        _WARNED = True
    env = os.environ.get(THREADS_ENV, '').strip()
    if before_import:
        cause, fix = (
            'its first op ran before import simharness',
            'import simharness before any TensorFlow op',
        )
    elif env and env != str(INTRA_OP_THREADS):
        cause, fix = f'{THREADS_ENV}={env}', f'set {THREADS_ENV}={INTRA_OP_THREADS} or unset it'
    else:
        cause, fix = (
            'set by tf.config.threading before its first op',
            f'leave the intra-op count at {INTRA_OP_THREADS}',
        )
    _LOG.warning(
        'simharness: TensorFlow runs ops on %d threads in this process (%s), so '
        'computations here may differ from worker processes in the last bits; for '
        'bit-identical stacks, %s.',
        count,
        cause,
        fix,
    )


#: XLA's CPU matmul and conv calls run single-threaded on the calling thread. With
#: multi-threaded Eigen (XLA's default) they are handed to the TF intra-op pool, which is one
#: thread here (`INTRA_OP_THREADS`): the compiled client computations of a thread stack's
#: threads then wait for each other (measured: a FedAvg round on 2 threads 115 ms compiled
#: against 97 ms in the graph runtime; 75-86 ms with this flag).
XLA_FLAG = '--xla_cpu_multi_thread_eigen=false'

#: XLA passes switched off so that a compiled client computation gives the same bits whether
#: it runs alone or as one iteration of a block's loop over clients (`EmbeddedFunction.
#: call_batched`). Loop-invariant code motion hoists work out of a loop by what the loop's
#: body shares: a Keras client update's batch loop, compiled alone and inside a block of 5 or
#: 12 clients, gave other bits for every client; with these passes off, the same bits for
#: blocks of 1, 5, 12 and 20 clients (and no change in speed measured on the reference
#: FedAvg round, 29.8 / 30.2 ms on process-2). tests/conformance/test_xla_bits.py and
#: test_keras_learning_bits.py check the bits on every stack.
XLA_DISABLED_PASSES = (
    'while-loop-invariant-code-motion',
    'while-loop-expensive-invariant-code-motion',
)


def configure_xla() -> None:
    """Adds `XLA_FLAG` (unless the user set that flag) and `XLA_DISABLED_PASSES` (to the
    user's own ``--xla_disable_hlo_passes``, if any) to ``XLA_FLAGS``: before XLA's first use
    in this process, which reads the variable once; worker processes inherit it."""
    flags = os.environ.get('XLA_FLAGS', '').split()
    if not any(f.startswith('--xla_cpu_multi_thread_eigen') for f in flags):
        flags.append(XLA_FLAG)
    key = '--xla_disable_hlo_passes='
    mine = [f for f in flags if f.startswith(key)]
    passes = [p for f in mine for p in f[len(key) :].split(',') if p]
    passes += [p for p in XLA_DISABLED_PASSES if p not in passes]
    flags = [f for f in flags if not f.startswith(key)] + [key + ','.join(passes)]
    os.environ['XLA_FLAGS'] = ' '.join(flags)
