"""The FedAvg reference round written as TFF users write it (issue 12).

The workload is ``shared/benchmarks/fedavg-synthetic-mlp.md``: round 0
(clients 0..99 of Synthetic(1, 1), the MLP 60-256-256-10 from the
reference initial weights, 5 SGD steps of batch 10, lr 0.05, server update
``w + mean(delta weighted by n)``), but written as the program of its §8,
not through `simharness.learning.FedAvg`:

* each client's data is ``tf.data.Dataset.from_tensor_slices((x_k, y_k)).batch(10)``;
* ``client_update`` is a ``sh.tf_computation(MODEL_TYPE, sh.SequenceType(BATCH_TYPE))``
  returning ``(delta, num_examples)``, in three variants (one test each):
  ``reduce`` (``dataset.reduce(initial_state, step)``), ``for_loop`` (``for
  batch in dataset:`` in a `tf.function`, converted by autograph) and
  ``keras`` (a Keras ``Sequential`` built inside the computation, the
  broadcast weights assigned to its variables, a Keras SGD optimizer, as in
  TFF's "Building your own federated learning algorithm" tutorial);
* ``next_fn`` is a ``sh.federated_computation``: ``federated_broadcast``,
  ``federated_map(client_update, federated_zip([w, datasets]))``,
  ``federated_mean(delta, weight=n)`` and a server-update ``federated_map``
  over ``federated_zip([server_weights, mean])``; it also returns
  ``federated_sum(n)`` (the round's example count, checked);
* it is called with the server weights (a tuple of arrays) and the list of
  the cohort's datasets (built once, outside the timed calls).

Each case runs on the ``thread`` and ``process-2`` stacks. In extra_info:
``clients_per_second``, ``ratio_to_builtin_fedavg`` (seconds of the built-in
`FedAvg.next` round on the same stack / ours: above 1 is faster than the
built-in round) and ``ratio_to_plain_tf_serial`` (seconds of
``test_fedavg.py``'s ``plain_tf_1proc`` baseline, the serial plain-TF loop in
one pinned process / ours), with the seconds they come from. Checked once
before timing: new weights within 1e-5 of the plain-TF round
(``plain_tf_worker.py``'s client update run in the driver) and 5,000
examples. `test_tff_style_reduce_final_loss` (timing only) runs the 6
reference rounds with the ``reduce`` program on the thread stack and checks
the final loss 2.331185 of the reference (shared numpy evaluator over all
50,000 samples, as ``experiments/reference.toml``).

With ``--benchmark-disable`` (CI) each case runs once on the thread stack
with 10 clients (checked against the plain-TF round of those 10); the
``process-2`` cases and the 6-round loss are timing only.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from .helpers import check_then_time, median_seconds, time_median
from .test_fedavg import _round_1proc, plain_tf, workload  # noqa: F401 (fixtures)

NUM_CLIENTS = 100
CI_CLIENTS = 10
BATCH = 10
LEARNING_RATE = 0.05
ROUNDS = 7
ATOL = 1e-5
REFERENCE_ROUNDS = 6
REFERENCE_FINAL_LOSS = 2.331185
GROUP = 'fedavg round, TFF-style program (100 clients, reference MLP)'

on_stacks = pytest.mark.parametrize(
    'simharness_stack',
    ['thread', pytest.param('process-2', marks=pytest.mark.timing_only)],
    indirect=True,
)


def _forward(w, x):
    import tensorflow as tf

    h = tf.nn.relu(tf.matmul(x, w[0]) + w[1])
    h = tf.nn.relu(tf.matmul(h, w[2]) + w[3])
    return tf.matmul(h, w[4]) + w[5]


def _sgd_step(w, batch):
    """One SGD step on a batch ``(x, y)``: the weights (a tuple) after it."""
    import tensorflow as tf

    x, y = batch
    w = list(w)
    with tf.GradientTape() as tape:
        tape.watch(w)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=_forward(w, x))
        )
    grads = tape.gradient(loss, w)
    return tuple(v - LEARNING_RATE * g for v, g in zip(w, grads))


def _build_programs(w0):
    """The three §8 programs: {'reduce' | 'for_loop' | 'keras': next_fn}."""
    import tensorflow as tf

    import simharness as sh

    model_type = sh.to_type(tuple(sh.TensorType(tf.float32, v.shape) for v in w0))
    batch_type = sh.to_type(
        (sh.TensorType(tf.float32, [None, 60]), sh.TensorType(tf.int32, [None]))
    )

    # -- 1. dataset.reduce
    @sh.tf_computation(model_type, sh.SequenceType(batch_type))
    def client_update_reduce(weights, dataset):
        initial = tuple(weights)

        def step(state, batch):
            w, n = state
            return _sgd_step(w, batch), n + tf.shape(batch[0])[0]

        w, n = dataset.reduce((initial, tf.constant(0, tf.int32)), step)
        return tuple(a - b for a, b in zip(w, initial)), tf.cast(n, tf.float32)

    # -- 2. for batch in dataset (autograph, through a tf.function)
    @tf.function
    def train_loop(weights, dataset):
        w = tuple(weights)
        n = tf.constant(0, tf.int32)
        for batch in dataset:
            w = _sgd_step(w, batch)
            n += tf.shape(batch[0])[0]
        return tuple(a - b for a, b in zip(w, weights)), tf.cast(n, tf.float32)

    @sh.tf_computation(model_type, sh.SequenceType(batch_type))
    def client_update_for_loop(weights, dataset):
        return train_loop(tuple(weights), dataset)

    # -- 3. Keras model and optimizer built inside the computation
    @tf.function
    def keras_train(model, dataset, server_weights, optimizer, loss_fn):
        weights = model.trainable_variables
        tf.nest.map_structure(lambda v, t: v.assign(t), weights, server_weights)
        n = tf.constant(0, tf.int32)
        for x, y in dataset:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
            n += tf.shape(x)[0]
        return tuple(v - t for v, t in zip(weights, server_weights)), tf.cast(n, tf.float32)

    @sh.tf_computation(model_type, sh.SequenceType(batch_type))
    def client_update_keras(weights, dataset):
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Input((60,)),
                tf.keras.layers.Dense(256, activation='relu'),
                tf.keras.layers.Dense(256, activation='relu'),
                tf.keras.layers.Dense(10),
            ]
        )
        optimizer = tf.keras.optimizers.SGD(learning_rate=LEARNING_RATE)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return keras_train(model, dataset, list(weights), optimizer, loss_fn)

    @sh.tf_computation(model_type, model_type)
    def server_update(weights, mean_delta):
        return tuple(w + d for w, d in zip(weights, mean_delta))

    def make_next(client_update):
        @sh.federated_computation(
            sh.type_at_server(model_type), sh.type_at_clients(sh.SequenceType(batch_type))
        )
        def next_fn(server_weights, datasets):
            weights_at_clients = sh.federated_broadcast(server_weights)
            out = sh.federated_map(client_update, sh.federated_zip([weights_at_clients, datasets]))
            delta, n = out[0], out[1]
            mean_delta = sh.federated_mean(delta, weight=n)
            new_weights = sh.federated_map(
                server_update, sh.federated_zip([server_weights, mean_delta])
            )
            return new_weights, sh.federated_sum(n)

        return next_fn

    return {
        'reduce': make_next(client_update_reduce),
        'for_loop': make_next(client_update_for_loop),
        'keras': make_next(client_update_keras),
    }


@pytest.fixture(scope='module')
def tf_pinned():
    """TF's intra-op threads pinned as on the stacks, before this module's first TF op."""
    from simharness.core.determinism import pin_tensorflow_threads

    return pin_tensorflow_threads()


@pytest.fixture(scope='module')
def tff_style(tf_pinned, workload):  # noqa: F811 (the fixture imported above)
    """The programs, the server weights and the datasets of all 1000 clients (built once)."""
    import tensorflow as tf

    from simharness.learning import reference_fedavg_workload

    cd, _ = reference_fedavg_workload()
    arrays = [cd.client_arrays(c) for c in cd.client_ids]
    datasets = [tf.data.Dataset.from_tensor_slices((a['x'], a['y'])).batch(BATCH) for a in arrays]
    w0 = tuple(workload['w0'])
    return {
        'programs': _build_programs(w0),
        'w0': w0,
        'datasets': datasets,
        'eval_x': np.concatenate([a['x'] for a in arrays]),
        'eval_y': np.concatenate([a['y'] for a in arrays]),
    }


@pytest.fixture(scope='module')
def plain_tf_round(workload):  # noqa: F811
    """num_clients -> the new weights of round 0 over clients 0..num_clients-1, plain TF."""
    import tensorflow as tf

    from .plain_tf_worker import build_client_update, run_clients

    cache = {}

    def get(num_clients):
        if num_clients not in cache:
            clients = [
                (tf.constant(x), tf.constant(y))
                for x, y in zip(workload['x'][:num_clients], workload['y'][:num_clients])
            ]
            acc, total = run_clients(build_client_update(), clients, workload['w0'])
            cache[num_clients] = [w + a / np.float32(total) for w, a in zip(workload['w0'], acc)]
        return cache[num_clients]

    return get


def _check(reference, num_clients):
    def check(result) -> None:
        weights, count = result
        assert float(count) == num_clients * 50, count
        diff = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(weights, reference))
        assert diff <= ATOL, f'weights differ from the plain-TF round by {diff}'

    return check


def _run_case(
    program,
    bench,
    stack,
    request,
    baselines,
    tff_style,
    workload,  # noqa: F811
    plain_tf_round,
    timing_disabled,
):
    bench.group = GROUP
    num_clients = CI_CLIENTS if timing_disabled else NUM_CLIENTS
    next_fn = tff_style['programs'][program]
    args = (tff_style['w0'], tff_style['datasets'][:num_clients])
    check_then_time(
        bench, next_fn, args, _check(plain_tf_round(num_clients), num_clients), rounds=ROUNDS
    )
    t = median_seconds(bench)
    if t is None:
        return
    fedavg, state, padded = workload['fedavg'], workload['state'], workload['padded']
    builtin = baselines.get(
        f'fedavg_builtin_{stack.name}', lambda: time_median(lambda: fedavg.next(state, padded), 5)
    )
    w0 = workload['w0']
    plain = baselines.get(
        'fedavg_plain_tf_1proc',
        lambda: time_median(
            lambda: _round_1proc(request.getfixturevalue('plain_tf').get(1), w0), 5
        ),
    )
    bench.extra_info.update(
        program=program,
        num_clients=num_clients,
        clients_per_second=num_clients / t,
        ms_per_client=1e3 * t / num_clients,
        builtin_fedavg_seconds=builtin,
        builtin_fedavg_clients_per_second=NUM_CLIENTS / builtin,
        plain_tf_serial_seconds=plain,
        plain_tf_serial_clients_per_second=NUM_CLIENTS / plain,
        ratio_to_builtin_fedavg=builtin / t,
        ratio_to_plain_tf_serial=plain / t,
    )


@on_stacks
def test_tff_style_reduce(
    simharness_benchmark,
    simharness_stack,
    request,
    baselines,
    tff_style,
    workload,
    plain_tf_round,
    timing_disabled,
):  # noqa: F811
    """The §8 program, client update with ``dataset.reduce(initial_state, step)``."""
    _run_case(
        'reduce',
        simharness_benchmark,
        simharness_stack,
        request,
        baselines,
        tff_style,
        workload,
        plain_tf_round,
        timing_disabled,
    )


@on_stacks
def test_tff_style_for_loop(
    simharness_benchmark,
    simharness_stack,
    request,
    baselines,
    tff_style,
    workload,
    plain_tf_round,
    timing_disabled,
):  # noqa: F811
    """The same with ``for batch in dataset:`` in a `tf.function` (autograph)."""
    _run_case(
        'for_loop',
        simharness_benchmark,
        simharness_stack,
        request,
        baselines,
        tff_style,
        workload,
        plain_tf_round,
        timing_disabled,
    )


@on_stacks
def test_tff_style_keras(
    simharness_benchmark,
    simharness_stack,
    request,
    baselines,
    tff_style,
    workload,
    plain_tf_round,
    timing_disabled,
):  # noqa: F811
    """A Keras model and SGD optimizer built inside the client update."""
    _run_case(
        'keras',
        simharness_benchmark,
        simharness_stack,
        request,
        baselines,
        tff_style,
        workload,
        plain_tf_round,
        timing_disabled,
    )


@pytest.mark.timing_only
@pytest.mark.parametrize('simharness_stack', ['thread'], indirect=True)
def test_tff_style_reduce_final_loss(simharness_benchmark, simharness_stack, tff_style):
    """The 6 reference rounds with the ``reduce`` program: final loss 2.331185.

    Timed once (6 rounds) and checked afterwards, as the memory case:
    running it twice would double a long case.
    """
    from simharness.learning.models import numpy_evaluate, reference_mlp_spec

    bench = simharness_benchmark
    bench.group = 'fedavg, TFF-style program: 6 reference rounds'
    next_fn, datasets = tff_style['programs']['reduce'], tff_style['datasets']
    k = len(datasets)
    seconds = []

    def six_rounds():
        w = tff_style['w0']
        seconds.clear()
        for r in range(REFERENCE_ROUNDS):
            cohort = [datasets[(r * NUM_CLIENTS + i) % k] for i in range(NUM_CLIENTS)]
            t0 = time.perf_counter()
            w, count = next_fn(w, cohort)
            seconds.append(time.perf_counter() - t0)
            assert float(count) == NUM_CLIENTS * 50, count
        return w

    weights = bench.pedantic(six_rounds, rounds=1, warmup_rounds=0, iterations=1)
    loss, accuracy = numpy_evaluate(
        reference_mlp_spec(), weights, tff_style['eval_x'], tff_style['eval_y']
    )
    bench.extra_info.update(
        final_loss=loss,
        final_accuracy=accuracy,
        first_round_seconds=seconds[0] if seconds else None,
        round_seconds=list(seconds),
    )
    if len(seconds) > 1:
        bench.extra_info['clients_per_second'] = NUM_CLIENTS / float(np.median(seconds[1:]))
    assert round(loss, 6) == REFERENCE_FINAL_LOSS, loss
