"""The FedAvg reference round with its client update in JAX, beside hand-written JAX loops.

The workload is ``shared/benchmarks/fedavg-synthetic-mlp.md`` round 0 (clients 0..99,
the MLP 60-256-256-10, 5 SGD steps of batch 10, lr 0.05), written with
`tff.jax.computation`s and the intrinsics (`simharness.jax.reference`): sequential (one
XLA call per client) and vectorized (``vectorize=True``: one `jax.vmap`ped call per
block of clients a worker holds).

Baselines, hand-written plain JAX (no simharness in the timed loop):

* ``plain_jax_1proc``: ``jax.jit(client_update)`` called per client in this process,
  the deltas averaged with numpy;
* ``plain_jax_2proc``: the same in 2 worker processes pinned to CPUs 0 and 1
  (`_WORKER`), 50 clients each, each sending back one partial sum.

In extra_info: ``clients_per_second``, ``speedup_over_plain_jax_1proc`` and (process-2)
``speedup_over_plain_jax_2proc`` (baseline seconds / ours: above 1 is faster), from
`PASSES` rounds of each timed interleaved after the case's own rounds (one run's
ratios: the machine's speed drifts between cases), with the seconds they come from;
the vectorized cases also ``speedup_over_sequential`` (the sequential round on the same
stack, interleaved too). Checked once before timing: the new weights within 1e-5 of
the plain-JAX round and 5,000 examples. With ``--benchmark-disable`` (CI): the thread
stack, 10 clients, checked, no baselines.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

from .helpers import check_then_time, disabled, interleaved_medians, median_seconds

NUM_CLIENTS = 100
CI_CLIENTS = 10
ROUNDS = 7
PASSES = 12
ATOL = 1e-5
GROUP = 'fedavg round, JAX client update (100 clients, reference MLP)'

pytestmark = pytest.mark.slow

jax = pytest.importorskip('jax', reason='the JAX frontend needs JAX: pip install -e ".[jax]"')

on_stacks = pytest.mark.parametrize(
    'simharness_stack',
    ['thread', pytest.param('process-2', marks=pytest.mark.timing_only)],
    indirect=True,
)


@pytest.fixture(scope='module')
def jax_workload():
    from simharness.jax import reference

    clients, w0 = reference.reference_clients()
    return {
        'clients': clients,
        'w0': tuple(w0),
        'sequential': reference.jax_reference_round(),
        'vectorized': reference.jax_reference_round(vectorize=True),
    }


def _plain_round(update, w0, clients):
    total = None
    for c in clients:
        delta, _ = update(w0, c)
        d = [np.asarray(x) for x in delta]
        total = d if total is None else [a + b for a, b in zip(total, d)]
    return [w + t / np.float32(len(clients)) for w, t in zip(w0, total)]


@pytest.fixture(scope='module')
def plain_jax(jax_workload):
    """``num_clients -> seconds-free round``: the plain-JAX round over the first clients."""
    from simharness.jax.reference import client_update_fn

    update = jax.jit(client_update_fn)
    w0 = jax_workload['w0']
    return lambda n: _plain_round(update, w0, jax_workload['clients'][:n])


class _TwoProcesses:
    """Two plain-JAX worker processes (`_WORKER`), 50 clients each."""

    def __init__(self, num_clients: int):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        half = num_clients // 2
        self.procs = [
            subprocess.Popen(
                [sys.executable, '-c', _WORKER, str(cpu), str(cpu * half), str((cpu + 1) * half)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            for cpu in range(2)
        ]
        for p in self.procs:
            assert p.stdout.readline() == b'ready\n'

    def round(self, w0):
        for p in self.procs:
            p.stdin.write(b'go\n')
            p.stdin.flush()
        parts = []
        for p in self.procs:
            (size,) = struct.unpack('<Q', p.stdout.read(8))
            parts.append(pickle.loads(p.stdout.read(size)))
        total = [a + b for a, b in zip(*parts)]
        return [w + t / np.float32(NUM_CLIENTS) for w, t in zip(w0, total)]

    def close(self):
        for p in self.procs:
            p.stdin.close()
        for p in self.procs:
            p.wait(timeout=30)


def _check(reference, num_clients):
    def check(result) -> None:
        weights, count = result
        assert float(count) == num_clients * 50, count
        diff = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(weights, reference))
        assert diff <= ATOL, f'weights differ from the plain-JAX round by {diff}'

    return check


@on_stacks
@pytest.mark.parametrize('mode', ['sequential', 'vectorized'])
def test_jax_fedavg_round(
    mode, simharness_benchmark, simharness_stack, jax_workload, plain_jax, timing_disabled
):
    """One reference round with JAX client updates, sequential or vectorized."""
    bench = simharness_benchmark
    bench.group = GROUP
    num_clients = CI_CLIENTS if timing_disabled else NUM_CLIENTS
    w0, clients = jax_workload['w0'], jax_workload['clients'][:num_clients]
    next_fn = jax_workload[mode].next
    check_then_time(
        bench, next_fn, (w0, clients), _check(plain_jax(num_clients), num_clients), rounds=ROUNDS
    )
    t = median_seconds(bench)
    if t is None or disabled(bench):
        return
    from simharness.jax.reference import client_update_fn

    update = jax.jit(client_update_fn)
    fns = {
        'ours': lambda: next_fn(w0, clients),
        'plain_jax_1proc': lambda: _plain_round(update, w0, clients),
    }
    if mode == 'vectorized':
        sequential = jax_workload['sequential'].next
        fns['sequential'] = lambda: sequential(w0, clients)
    two = _TwoProcesses(num_clients) if simharness_stack.name == 'process-2' else None
    try:
        if two is not None:
            fns['plain_jax_2proc'] = lambda: two.round(w0)
        medians = dict(zip(fns, interleaved_medians(list(fns.values()), PASSES)))
    finally:
        if two is not None:
            two.close()
    ours = medians.pop('ours')
    info = {
        'mode': mode,
        'num_clients': num_clients,
        'clients_per_second': num_clients / t,
        'interleaved_seconds': ours,
    }
    for name, seconds in medians.items():
        key = 'sequential' if name == 'sequential' else name
        info[f'{key}_seconds'] = seconds
        info[f'speedup_over_{key}'] = seconds / ours
    bench.extra_info.update(info)


#: A plain-JAX worker (run with ``python -c``): pinned to CPU argv[1], it runs clients
#: [argv[2], argv[3]) of round 0 per ``go`` line and writes their summed deltas back.
_WORKER = """
import os, pickle, struct, sys
import numpy as np
cpu, lo, hi = (int(a) for a in sys.argv[1:4])
os.sched_setaffinity(0, {cpu})
import jax
from simharness.jax.reference import client_update_fn, reference_clients
clients, w0 = reference_clients()
clients, w0 = clients[lo:hi], tuple(w0)
update = jax.jit(client_update_fn)
update(w0, clients[0])
out = sys.stdout.buffer
out.write(b'ready\\n')
out.flush()
for line in sys.stdin.buffer:
    if line.strip() != b'go':
        break
    total = None
    for c in clients:
        d = [np.asarray(x) for x in update(w0, c)[0]]
        total = d if total is None else [a + b for a, b in zip(total, d)]
    data = pickle.dumps(total)
    out.write(struct.pack('<Q', len(data)) + data)
    out.flush()
"""
