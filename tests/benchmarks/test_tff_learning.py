"""The FedAvg reference round written with ``tff.learning`` (issue 25, "Datasets at tensor speed").

The workload is ``shared/benchmarks/fedavg-synthetic-mlp.md`` (round 0:
clients 0..99 of Synthetic(1, 1), the MLP 60-256-256-10 from the reference
initial weights, 5 SGD steps of batch 10 at 0.05, server update ``w + mean
delta`` weighted by the example counts), written as a TFF 0.88 user writes
it, with ``import simharness as tff``::

    def model_fn():
        keras_model = tf.keras.Sequential([Input((60,)), Dense(256, 'relu'),
                                           Dense(256, 'relu'), Dense(10)])
        return tff.learning.models.from_keras_model(
            keras_model, loss=SparseCategoricalCrossentropy(from_logits=True),
            input_spec=(TensorSpec([None, 60], float32), TensorSpec([None], int32)))

    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
    state = process.set_model_weights(process.initialize(), ModelWeights(w0, ()))
    state, metrics = process.next(state, [tf.data.Dataset.from_tensor_slices((x_k, y_k)).batch(10)
                                          for k in cohort])

Cases (each on the ``thread`` and ``process-2`` stacks):

* ``keras``: the program above (a `VariableModel` of ``from_keras_model``);
* ``keras_preprocessed``: ``keras`` over the same data as a ``TestClientData`` of dict
  elements, ``preprocess``ed with ``batch(10)`` then ``map`` to ``(x, y)`` (as TFF's
  tutorials feed clients: a pipeline that crosses to workers as its graph);
* ``functional``: the same Keras model as a `FunctionalModel` of
  ``tff.learning.models.functional_model_from_keras`` (its initial weights
  set to the reference ones before; ``metrics_constructor`` gives it the
  metrics ``from_keras_model`` adds: ``loss``, ``num_examples``,
  ``num_batches``), passed as ``model_fn``.

In extra_info: ``clients_per_second``, ``ratio_to_builtin_fedavg`` (seconds of
the built-in `simharness.learning.FedAvg.next` round over padded arrays on the
same stack / ours, medians of `PAIRS` rounds of each timed interleaved after the
benchmark's own rounds: the goal is >= 0.9) and
``ratio_to_plain_tf_serial`` (``test_fedavg.py``'s serial plain-TF loop in one
pinned process / ours), with the seconds they come from. Checked once before
timing: the new model weights within 1e-5 of the plain-TF round, and the
metrics TFF reports (``client_work/train/num_examples`` 5,000,
``num_batches`` 500, a finite ``loss``). `test_tff_learning_final_loss`
(timing only) runs the 6 reference rounds with the ``keras`` process on the
``process-2`` stack and checks the final loss 2.331185 of the reference (the
shared numpy evaluator over all 50,000 samples).

With ``--benchmark-disable`` (CI) each case runs once on the thread stack
with 10 clients (checked against the plain-TF round of those 10); the
``process-2`` cases and the 6-round loss are timing only.
"""

from __future__ import annotations

import collections
import time

import numpy as np
import pytest

from .helpers import check_then_time, interleaved_medians, median_seconds, time_median
from .test_fedavg import _round_1proc, plain_tf, workload  # noqa: F401 (fixtures)
from .test_tff_style import plain_tf_round, tf_pinned  # noqa: F401 (fixtures)

NUM_CLIENTS = 100
CI_CLIENTS = 10
EXAMPLES = 50
BATCH = 10
LEARNING_RATE = 0.05
ROUNDS = 7
#: Pairs of rounds (ours, the built-in one) timed interleaved for the ratio.
PAIRS = 10
ATOL = 1e-5
REFERENCE_ROUNDS = 6
REFERENCE_FINAL_LOSS = 2.331185
GROUP = 'fedavg round, tff.learning.algorithms.build_weighted_fed_avg (100 clients, reference MLP)'

on_stacks = pytest.mark.parametrize(
    'simharness_stack',
    ['thread', pytest.param('process-2', marks=pytest.mark.timing_only)],
    indirect=True,
)


def _keras_mlp():
    import tensorflow as tf

    return tf.keras.Sequential(
        [
            tf.keras.layers.Input((60,)),
            tf.keras.layers.Dense(256, activation='relu'),
            tf.keras.layers.Dense(256, activation='relu'),
            tf.keras.layers.Dense(10),
        ]
    )


def _input_spec():
    import tensorflow as tf

    return (tf.TensorSpec([None, 60], tf.float32), tf.TensorSpec([None], tf.int32))


def _build_processes(w0):
    """{'keras' | 'functional': (process, initial state at the reference weights)}."""
    import tensorflow as tf

    import simharness as tff

    def model_fn():
        return tff.learning.models.from_keras_model(
            _keras_mlp(),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            input_spec=_input_spec(),
        )

    keras_process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(LEARNING_RATE),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    weights = tff.learning.models.ModelWeights(trainable=tuple(w0), non_trainable=())
    keras_state = keras_process.set_model_weights(keras_process.initialize(), weights)

    keras_model = _keras_mlp()
    keras_model.set_weights(list(w0))
    functional_model = tff.learning.models.functional_model_from_keras(
        keras_model,
        tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        _input_spec(),
        metrics_constructor=collections.OrderedDict(
            loss=lambda: tf.keras.metrics.SparseCategoricalCrossentropy(from_logits=True),
            num_examples=tff.learning.metrics.NumExamplesCounter,
            num_batches=tff.learning.metrics.NumBatchesCounter,
        ),
    )
    functional_process = tff.learning.algorithms.build_weighted_fed_avg(
        functional_model,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(LEARNING_RATE),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    functional_state = functional_process.initialize()
    return {
        'keras': (keras_process, keras_state),
        'functional': (functional_process, functional_state),
    }


@pytest.fixture(scope='module')
def tff_learning(tf_pinned, workload):  # noqa: F811 (the fixtures imported above)
    """The processes, their initial states and the datasets of all 1000 clients (built once)."""
    import tensorflow as tf

    from simharness.learning import reference_fedavg_workload

    cd, _ = reference_fedavg_workload()
    arrays = [cd.client_arrays(c) for c in cd.client_ids]
    datasets = [tf.data.Dataset.from_tensor_slices((a['x'], a['y'])).batch(BATCH) for a in arrays]
    # the same data as TFF's tutorials give it: a ClientData of dict elements, preprocessed
    # (batched, then mapped to the model's (x, y)): a pipeline sent to workers as its graph
    import simharness as tff

    client_data = tff.simulation.datasets.TestClientData(
        {str(k): collections.OrderedDict(x=a['x'], y=a['y']) for k, a in enumerate(arrays)}
    )
    preprocessed = client_data.preprocess(
        lambda ds: ds.batch(BATCH).map(lambda e: (e['x'], e['y']))
    )
    return {
        'processes': _build_processes(tuple(workload['w0'])),
        'datasets': datasets,
        'preprocessed': [
            preprocessed.create_tf_dataset_for_client(str(k)) for k in range(NUM_CLIENTS)
        ],
        'eval_x': np.concatenate([a['x'] for a in arrays]),
        'eval_y': np.concatenate([a['y'] for a in arrays]),
    }


def _trainable(process, state):
    weights = process.get_model_weights(state)
    trainable = weights.trainable if hasattr(weights, 'trainable') else weights[0]
    return [np.asarray(w) for w in trainable]


def _check(process, reference, num_clients):
    def check(result) -> None:
        state, metrics = result
        train = metrics['client_work']['train']
        assert int(train['num_examples']) == num_clients * EXAMPLES, metrics
        assert int(train['num_batches']) == num_clients * EXAMPLES // BATCH, metrics
        assert np.isfinite(float(train['loss'])), metrics
        assert int(metrics['finalizer']['update_non_finite']) == 0, metrics
        diff = max(
            float(np.max(np.abs(a - b))) for a, b in zip(_trainable(process, state), reference)
        )
        assert diff <= ATOL, f'weights differ from the plain-TF round by {diff}'

    return check


def _run_case(
    case,
    bench,
    request,
    baselines,
    tff_learning,
    workload,  # noqa: F811
    plain_tf_round,
    timing_disabled,
    data='datasets',
):  # noqa: F811
    bench.group = GROUP
    num_clients = CI_CLIENTS if timing_disabled else NUM_CLIENTS
    process, state = tff_learning['processes'][case]
    args = (state, tff_learning[data][:num_clients])
    check_then_time(
        bench,
        process.next,
        args,
        _check(process, plain_tf_round(num_clients), num_clients),
        rounds=ROUNDS,
    )
    t = median_seconds(bench)
    if t is None:
        return
    fedavg, fstate, padded = workload['fedavg'], workload['state'], workload['padded']
    ours, builtin = interleaved_medians(
        [lambda: process.next(*args), lambda: fedavg.next(fstate, padded)], PAIRS
    )
    w0 = workload['w0']
    plain = baselines.get(
        'fedavg_plain_tf_1proc',
        lambda: time_median(
            lambda: _round_1proc(request.getfixturevalue('plain_tf').get(1), w0), 5
        ),
    )
    bench.extra_info.update(
        case=case,
        num_clients=num_clients,
        clients_per_second=num_clients / t,
        ms_per_client=1e3 * t / num_clients,
        interleaved_seconds=ours,
        builtin_fedavg_seconds=builtin,
        builtin_fedavg_clients_per_second=NUM_CLIENTS / builtin,
        plain_tf_serial_seconds=plain,
        plain_tf_serial_clients_per_second=NUM_CLIENTS / plain,
        ratio_to_builtin_fedavg=builtin / ours,
        ratio_to_plain_tf_serial=plain / t,
    )


@on_stacks
def test_tff_learning_keras(
    simharness_benchmark,
    simharness_stack,
    request,
    baselines,
    tff_learning,
    workload,
    plain_tf_round,
    timing_disabled,
):  # noqa: F811
    """``build_weighted_fed_avg`` of a ``from_keras_model`` ``model_fn``, SGD via ``build_sgdm``."""
    _run_case(
        'keras',
        simharness_benchmark,
        request,
        baselines,
        tff_learning,
        workload,
        plain_tf_round,
        timing_disabled,
    )


@on_stacks
def test_tff_learning_keras_preprocessed(
    simharness_benchmark,
    simharness_stack,
    request,
    baselines,
    tff_learning,
    workload,
    plain_tf_round,
    timing_disabled,
):  # noqa: F811
    """The ``keras`` case over ``TestClientData.preprocess(batch, map)`` datasets (a pipeline
    the workers read from its graph, once: `runtime.datasets.BlobReader`)."""
    _run_case(
        'keras',
        simharness_benchmark,
        request,
        baselines,
        tff_learning,
        workload,
        plain_tf_round,
        timing_disabled,
        data='preprocessed',
    )


@on_stacks
def test_tff_learning_functional(
    simharness_benchmark,
    simharness_stack,
    request,
    baselines,
    tff_learning,
    workload,
    plain_tf_round,
    timing_disabled,
):  # noqa: F811
    """The same with a `FunctionalModel` of ``functional_model_from_keras``."""
    _run_case(
        'functional',
        simharness_benchmark,
        request,
        baselines,
        tff_learning,
        workload,
        plain_tf_round,
        timing_disabled,
    )


@pytest.mark.timing_only
@pytest.mark.parametrize('simharness_stack', ['process-2'], indirect=True)
def test_tff_learning_final_loss(simharness_benchmark, simharness_stack, tff_learning):
    """The 6 reference rounds with the ``keras`` process: final loss 2.331185.

    Timed once (6 rounds) and checked afterwards: running it twice would
    double a long case.
    """
    from simharness.learning.models import numpy_evaluate, reference_mlp_spec

    bench = simharness_benchmark
    bench.group = 'fedavg, tff.learning.algorithms.build_weighted_fed_avg: 6 reference rounds'
    process, state0 = tff_learning['processes']['keras']
    datasets = tff_learning['datasets']
    k = len(datasets)
    seconds = []

    def six_rounds():
        state = state0
        seconds.clear()
        for r in range(REFERENCE_ROUNDS):
            cohort = [datasets[(r * NUM_CLIENTS + i) % k] for i in range(NUM_CLIENTS)]
            t0 = time.perf_counter()
            state, metrics = process.next(state, cohort)
            seconds.append(time.perf_counter() - t0)
            assert int(metrics['client_work']['train']['num_examples']) == NUM_CLIENTS * EXAMPLES
        return state

    state = bench.pedantic(six_rounds, rounds=1, warmup_rounds=0, iterations=1)
    loss, accuracy = numpy_evaluate(
        reference_mlp_spec(),
        _trainable(process, state),
        tff_learning['eval_x'],
        tff_learning['eval_y'],
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
