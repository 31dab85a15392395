"""One FedAvg round of the reference workload: 100 clients, reference MLP, compute-bound.

The workload is ``shared/benchmarks/fedavg-synthetic-mlp.md`` (round 0:
clients 0..99 of Synthetic(1, 1), the MLP 60-256-256-10, 5 local SGD steps
per client). Each call is one round from the same initial state.

Baselines (plain TensorFlow, no simharness; see `plain_tf_worker.py`):

* ``plain_tf_1proc``: a `tf.function` client update called per client in one
  process pinned to one CPU, 1 TF thread: the limit for one core.
* ``plain_tf_2proc``: the same in 2 pinned processes, 50 clients each, each
  sending back one partial sum: the limit for 2 cores.
* ``plain_tf_2proc_xla``: the same, the client update compiled by XLA
  (``tf.function(jit_compile=True)``).

Our round runs its client update XLA-compiled (the rule of `simharness.core.xla`
compiles it); ``test_fedavg_round_graph_runtime`` runs it with XLA forced off.
``test_matmul_one_core`` times a 1024^3 matmul on one TF thread: beside it,
``client_gflops_per_core`` (25.0 MFLOP per client update) says how much of a
core the client update uses.

In extra_info: ``ratio_to_single_process_tf`` and ``ratio_to_two_process_tf``
and ``ratio_to_two_process_tf_xla`` (stack median / baseline median, each measured in
its own case; below 1 is faster than the baseline), ``speedup_over_two_process_tf`` and
``speedup_over_two_process_tf_xla`` (baseline / ours, from `INTERLEAVED_PASSES` rounds of
each timed interleaved after the case's own rounds: the figures of one run that the
issue's targets are read from, as the machine's speed drifts between cases),
``clients_per_second``, ``ms_per_client``. Correctness: the new weights
match the plain-TF round (its client update run in this process) to 1e-5
and the round saw 5,000 examples. With ``--benchmark-disable`` the
2-process baseline is skipped (it would start a second TF process).
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from .helpers import (
    STACKS,
    check_then_time,
    disabled,
    interleaved_medians,
    median_seconds,
    time_median,
)

NUM_CLIENTS = 100
ROUNDS = 5
#: Passes of (ours, hand-written 2 processes, the same with XLA), interleaved, for the
#: speed-ups of one run (`helpers.interleaved_medians`). 40 passes take ~3 s; with 12 the
#: speed-up of the same code spread over 1.14-1.28x in six runs on the shared 2-core machine.
INTERLEAVED_PASSES = 40
ATOL = 1e-5
GROUP = 'fedavg round (100 clients, reference MLP)'
WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'plain_tf_worker.py')

on_stacks = pytest.mark.parametrize('simharness_stack', STACKS, indirect=True)


class PlainTF:
    """One plain-TF worker process (`plain_tf_worker.py`), pinned to `cpu`."""

    def __init__(self, cpu: int, xla: bool = False):
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, WORKER_SCRIPT, str(cpu)] + (['xla'] if xla else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self.cpu = cpu

    def send(self, *msg) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(struct.pack('<Q', len(data)) + data)
        self.proc.stdin.flush()

    def recv(self):
        header = self.proc.stdout.read(8)
        if len(header) < 8:
            self._log.seek(0)
            raise RuntimeError(
                'plain TF worker died:\n' + self._log.read().decode(errors='replace')[-4000:]
            )
        (n,) = struct.unpack('<Q', header)
        return pickle.loads(self.proc.stdout.read(n))

    def ask_to_exit(self) -> None:
        if getattr(self, '_asked', False):
            return
        self._asked = True
        try:
            self.send('close')
        except (BrokenPipeError, OSError, ValueError):
            pass

    def close(self) -> None:
        self.ask_to_exit()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        self._log.close()


@pytest.fixture(scope='module')
def workload():
    from simharness.learning import reference_fedavg_workload
    from simharness.learning import FedAvg, FedAvgConfig
    from simharness.learning.models import reference_mlp_spec

    cd, w0 = reference_fedavg_workload()
    arrays = [cd.client_arrays(cid) for cid in cd.client_ids[:NUM_CLIENTS]]
    fedavg = FedAvg(reference_mlp_spec(), FedAvgConfig(), 50)
    x = np.stack([a['x'] for a in arrays])
    y = np.stack([a['y'] for a in arrays])
    return {
        'fedavg': fedavg,
        'padded': fedavg.pad(arrays),
        'state': fedavg.initialize(w0),
        'w0': [np.asarray(v, np.float32) for v in w0],
        'x': x,
        'y': y,
    }


class PlainTFProcesses:
    """Plain-TF worker processes, started on first use, pinned to the usable CPUs in turn."""

    def __init__(self, workload, xla: bool = False):
        self._workload = workload
        self._xla = xla
        self._procs = []
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else [0]
        self._cpus = cpus

    def get(self, count: int):
        """The first `count` processes; each holds 'all' clients and its 'half' of them."""
        x, y, half = self._workload['x'], self._workload['y'], NUM_CLIENTS // 2
        new = [
            PlainTF(self._cpus[i % len(self._cpus)], self._xla)
            for i in range(len(self._procs), count)
        ]
        self._procs.extend(new)
        for p in new:
            assert p.recv()[0] == 'ready'
        for p in new:
            i = self._procs.index(p)
            lo, hi = (0, half) if i == 0 else (half, NUM_CLIENTS)
            p.send('load', 'all', x, y)
            assert p.recv() == 'ok'
            p.send('load', 'half', x[lo:hi], y[lo:hi])
            assert p.recv() == 'ok'
        return self._procs[:count]

    def close(self) -> None:
        close_all(self._procs)


def close_all(procs: list) -> None:
    """Closes plain-TF processes (all asked first: each takes ~1 s to exit TF); empties `procs`."""
    for p in procs:
        p.ask_to_exit()
    while procs:
        procs.pop().close()


@pytest.fixture(scope='module')
def plain_tf(workload):
    procs = PlainTFProcesses(workload)
    try:
        yield procs
    finally:
        procs.close()


def _finish(w0, partials):
    acc = [sum(p[0][i] for p in partials) for i in range(len(w0))]
    total = sum(p[1] for p in partials)
    return [w + a / np.float32(total) for w, a in zip(w0, acc)]


def _round_1proc(procs, w0):
    procs[0].send('round', 'all', w0)
    return _finish(w0, [procs[0].recv()])


def _round_2proc(procs, w0):
    for p in procs:
        p.send('round', 'half', w0)
    return _finish(w0, [p.recv() for p in procs])


@pytest.fixture(scope='module')
def plain_tf_xla(workload):
    procs = PlainTFProcesses(workload, xla=True)
    try:
        yield procs
    finally:
        procs.close()


@pytest.fixture(scope='module')
def reference_weights(workload):
    """The new weights after the round, by the plain-TF client update run in this process."""
    import tensorflow as tf
    from .plain_tf_worker import build_client_update, run_clients

    clients = [(tf.constant(x), tf.constant(y)) for x, y in zip(workload['x'], workload['y'])]
    return _finish(workload['w0'], [run_clients(build_client_update(), clients, workload['w0'])])


def _check_weights(reference):
    def check(weights) -> None:
        diff = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(weights, reference))
        assert diff <= ATOL, f'weights differ from the plain-TF round by {diff}'

    return check


def _record_plain(benchmark, baselines, key):
    t = median_seconds(benchmark)
    baselines.put(key, t)
    if t is not None:
        benchmark.extra_info.update(
            clients_per_second=NUM_CLIENTS / t, ms_per_client=1e3 * t / NUM_CLIENTS
        )


def test_fedavg_round_plain_tf_1proc(benchmark, baselines, plain_tf, workload, reference_weights):
    """Baseline: plain TF, one pinned process, 1 TF thread, tf.function per client."""
    benchmark.group = GROUP
    check_then_time(
        benchmark,
        _round_1proc,
        (plain_tf.get(1), workload['w0']),
        _check_weights(reference_weights),
        rounds=ROUNDS,
    )
    _record_plain(benchmark, baselines, 'fedavg_plain_tf_1proc')


@pytest.mark.timing_only
def test_fedavg_round_plain_tf_2proc(benchmark, baselines, plain_tf, workload, reference_weights):
    """Baseline: plain TF, two pinned processes, each sends back one partial sum."""
    benchmark.group = GROUP
    check_then_time(
        benchmark,
        _round_2proc,
        (plain_tf.get(2), workload['w0']),
        _check_weights(reference_weights),
        rounds=ROUNDS,
    )
    _record_plain(benchmark, baselines, 'fedavg_plain_tf_2proc')


@on_stacks
def test_fedavg_round(
    simharness_benchmark,
    simharness_stack,
    baselines,
    plain_tf,
    plain_tf_xla,
    workload,
    reference_weights,
):
    """One FedAvg round (FedAvg.next) on the stack."""
    _time_round(
        simharness_benchmark,
        simharness_stack,
        baselines,
        plain_tf,
        plain_tf_xla,
        workload,
        reference_weights,
    )


def _time_round(bench, stack, baselines, plain_tf, plain_tf_xla, workload, reference_weights):
    """Checks then times FedAvg.next on the stack (in the current context), with its ratios."""
    bench.group = GROUP
    fedavg, state, padded = workload['fedavg'], workload['state'], workload['padded']
    check_then_time(
        bench, fedavg.next, (state, padded), _check_round(reference_weights), rounds=ROUNDS
    )
    t = median_seconds(bench)
    if t is not None:
        bench.extra_info.update(
            _round_info(t, stack.name, baselines, plain_tf, plain_tf_xla, workload['w0'])
        )
        w0 = workload['w0']
        ours, two, two_xla = interleaved_medians(
            [
                lambda: fedavg.next(state, padded),
                lambda: _round_2proc(plain_tf.get(2), w0),
                lambda: _round_2proc(plain_tf_xla.get(2), w0),
            ],
            INTERLEAVED_PASSES,
        )
        bench.extra_info.update(
            interleaved_seconds=ours,
            interleaved_plain_tf_2proc_seconds=two,
            interleaved_plain_tf_2proc_xla_seconds=two_xla,
            speedup_over_two_process_tf=two / ours,
            speedup_over_two_process_tf_xla=two_xla / ours,
        )


def _check_round(reference_weights):
    """A check of a FedAvg round's result: the weights of the plain-TF round, every example."""
    weights_ok = _check_weights(reference_weights)

    def check(result) -> None:
        new_state, metrics = result
        assert metrics['num_examples'] == NUM_CLIENTS * 50, metrics
        assert np.isfinite(metrics['loss']), metrics
        weights_ok(new_state['weights'])
        assert int(new_state['round_num']) == 1

    return check


def _round_info(t: float, stack_name: str, baselines, plain_tf, plain_tf_xla, w0) -> dict:
    """extra_info of a round of `t` seconds: clients/s, the plain-TF baselines and ratios."""
    one = baselines.get(
        'fedavg_plain_tf_1proc',
        lambda: time_median(lambda: _round_1proc(plain_tf.get(1), w0), ROUNDS),
    )
    two = baselines.get(
        'fedavg_plain_tf_2proc',
        lambda: time_median(lambda: _round_2proc(plain_tf.get(2), w0), ROUNDS),
    )
    two_xla = baselines.get(
        'fedavg_plain_tf_2proc_xla',
        lambda: time_median(lambda: _round_2proc(plain_tf_xla.get(2), w0), ROUNDS),
    )
    return dict(
        num_clients=NUM_CLIENTS,
        clients_per_second=NUM_CLIENTS / t,
        ms_per_client=1e3 * t / NUM_CLIENTS,
        plain_tf_1proc_seconds=one,
        plain_tf_2proc_seconds=two,
        plain_tf_2proc_xla_seconds=two_xla,
        ratio_to_single_process_tf=t / one,
        ratio_to_two_process_tf=t / two,
        ratio_to_two_process_tf_xla=t / two_xla,
        **_rates(t, stack_name, baselines),
    )


#: FLOPs of one client update of the reference workload: 5 SGD steps of batch 10 through the
#: MLP 60-256-256-10, forward 2 x 10 x 83,456 and backward twice that: 25.0 MFLOP.
CLIENT_FLOP = 3 * 2 * 10 * (60 * 256 + 256 * 256 + 256 * 10) * 5
MATMUL_N = 1024


def _cores(stack_name: str) -> int:
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 1
    return min(ncpu, int(stack_name.split('-')[1])) if stack_name.startswith('process-') else ncpu


def _rates(t: float, stack_name: str, baselines) -> dict:
    """The client update's GFLOP/s per core in a round of `t` seconds, beside a core's matmul."""
    per_core = CLIENT_FLOP * NUM_CLIENTS / t / _cores(stack_name) / 1e9
    matmul = baselines.get('matmul_one_core', _time_matmul)
    return {
        'client_gflops_per_core': per_core,
        'matmul_gflops_one_core': 2 * MATMUL_N**3 / matmul / 1e9,
    }


def _time_matmul() -> float:
    import tensorflow as tf
    from simharness.core.determinism import pin_tensorflow_threads

    pin_tensorflow_threads()  # one TF thread, as every client computation runs
    a = tf.random.stateless_uniform([MATMUL_N, MATMUL_N], [1, 2])
    fn = tf.function(lambda x: tf.matmul(x, x))
    fn(a).numpy()
    return time_median(lambda: fn(a).numpy(), ROUNDS)


def test_matmul_one_core(benchmark, baselines):
    """A core's rate: a 1024^3 float32 matmul, one TF thread (the scale for GFLOP/s above)."""
    benchmark.group = GROUP
    import tensorflow as tf
    from simharness.core.determinism import pin_tensorflow_threads

    pin_tensorflow_threads()
    n = 64 if disabled(benchmark) else MATMUL_N
    a = tf.random.stateless_uniform([n, n], [1, 2])
    fn = tf.function(lambda x: tf.matmul(x, x))
    check_then_time(
        benchmark,
        lambda: fn(a).numpy(),
        (),
        lambda r: np.testing.assert_allclose(r, a.numpy() @ a.numpy(), rtol=1e-4),
        rounds=ROUNDS,
    )
    t = median_seconds(benchmark)
    if t is not None:
        baselines.put('matmul_one_core', t)
        benchmark.extra_info.update(gflops=2 * n**3 / t / 1e9)


@pytest.mark.timing_only
def test_fedavg_round_plain_tf_2proc_xla(
    benchmark, baselines, plain_tf_xla, workload, reference_weights
):
    """Baseline: the same two processes, the client update compiled (jit_compile=True)."""
    benchmark.group = GROUP
    check_then_time(
        benchmark,
        _round_2proc,
        (plain_tf_xla.get(2), workload['w0']),
        _check_weights(reference_weights),
        rounds=ROUNDS,
    )
    _record_plain(benchmark, baselines, 'fedavg_plain_tf_2proc_xla')


@pytest.mark.parametrize('simharness_stack', ['process-2'], indirect=True)
def test_fedavg_round_graph_runtime(
    simharness_benchmark,
    simharness_stack,
    baselines,
    plain_tf,
    plain_tf_xla,
    workload,
    reference_weights,
):
    """The round of `test_fedavg_round` with XLA forced off: TF's graph runtime."""
    import simharness as sh

    with sh.execution_context(simharness_stack.factory, jit_compile=False):
        _time_round(
            simharness_benchmark,
            simharness_stack,
            baselines,
            plain_tf,
            plain_tf_xla,
            workload,
            reference_weights,
        )


# ------------------------------------------------------------------ the CNN, compiled and not

CNN_GROUP = 'fedavg round, CNN (28x28x1, 20 clients of 50 examples)'
CNN_CLIENTS = 20


@pytest.fixture(scope='module')
def cnn_workload():
    from simharness.learning import FedAvg, FedAvgConfig
    from simharness.learning.models import ModelSpec, init_weights

    spec = ModelSpec('cnn', (28, 28, 1), 10)
    fedavg = FedAvg(spec, FedAvgConfig(), 50)
    rng = np.random.default_rng(0)
    arrays = [
        {
            'x': rng.normal(size=(50, 28, 28, 1)).astype(np.float32),
            'y': rng.integers(0, 10, 50).astype(np.int32),
        }
        for _ in range(CNN_CLIENTS)
    ]
    return {
        'fedavg': fedavg,
        'arrays': arrays,
        'state': fedavg.initialize(init_weights(spec, seed=1)),
    }


@pytest.mark.parametrize(
    'xla', ['graph-runtime', pytest.param('compiled', marks=pytest.mark.timing_only)]
)
@pytest.mark.parametrize('simharness_stack', ['process-2'], indirect=True)
def test_cnn_round(simharness_benchmark, simharness_stack, baselines, cnn_workload, xla):
    """The CNN of `learning.models` in a FedAvg round: the rule leaves its convolutions to
    oneDNN (graph runtime); ``compiled`` forces XLA (``jit_compile=True``) for comparison
    (timing only: its compile alone takes ~6 s of a CI run)."""
    import simharness as sh

    bench = simharness_benchmark
    bench.group = CNN_GROUP
    fedavg, state = cnn_workload['fedavg'], cnn_workload['state']
    n = 4 if disabled(bench) else CNN_CLIENTS
    padded = fedavg.pad(cnn_workload['arrays'][:n])

    def check(result) -> None:
        new_state, metrics = result
        assert metrics['num_examples'] == n * 50, metrics
        assert all(np.all(np.isfinite(w)) for w in new_state['weights'])

    with sh.execution_context(simharness_stack.factory, jit_compile=(xla == 'compiled')):
        check_then_time(bench, fedavg.next, (state, padded), check, rounds=3)
    t = median_seconds(bench)
    if t is None:
        return
    bench.extra_info.update(num_clients=n, clients_per_second=n / t)
    if xla == 'graph-runtime':
        baselines.put('cnn_graph_runtime', t)
    else:
        graph = baselines.get('cnn_graph_runtime', lambda: None)
        if graph is not None:
            bench.extra_info.update(ratio_to_graph_runtime=t / graph)
