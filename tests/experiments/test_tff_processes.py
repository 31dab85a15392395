"""The config layer's algorithm table built through TFF's learning API (`experiments.processes`).

Each ``[algorithm] name`` of a tiny config builds a ``tff.learning`` process
(``build_weighted_fed_avg`` / ``fed_prox`` / ``fed_sgd`` with ``build_*``
optimizers) that runs a round on ``tf.data`` client datasets; FedAvg and
FedAvgM reach the weights of the benchmarks' built-in `FedAvg` bit for bit
(the padded-array processes the runner used before gave the same bits, and
the others within float rounding where TFF's optimizer formulas differ); the
``[aggregator]`` table maps to TFF's factories.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import pytest

from simharness import aggregators
from simharness.errors import ConfigError
from simharness.experiments import processes as P
from simharness.learning.fedavg import FedAvg, FedAvgConfig
from simharness.learning.models import get_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
from experiment_helpers import TINY, make_config  # noqa: E402


@pytest.fixture(scope='module')
def tiny():
    from simharness import data as D

    cd = D.synthetic_alpha_beta(num_clients=6, samples_per_client=10, dim=5, num_classes=3, seed=0)
    return {
        'arrays': [cd.client_arrays(c) for c in cd.client_ids[:4]],
        'spec': get_model('mlp', (5,), 3, hidden_sizes=(8,)),
    }


ALGORITHMS = ('fedadagrad', 'fedadam', 'fedavg', 'fedavgm', 'fedprox', 'fedsgd', 'fedyogi')
#: Server momentum of the built-in FedAvg that gives the same bits.
BUILTIN_MOMENTUM = {'fedavg': 0.0, 'fedavgm': 0.9}


@pytest.mark.parametrize('name', ALGORITHMS)
def test_every_algorithm_builds_a_tff_process_that_trains(tiny, name):
    config = make_config(TINY, algorithm={'name': name})
    model = P.model_from_spec(tiny['spec'], 0)
    process = P.build_learning_process(config, model)
    state = process.initialize()
    new_state, metrics = process.next(state, P.client_datasets(tiny['arrays'], 5))
    row = P.round_metrics(metrics)
    assert row['num_examples'] == 40.0 and np.isfinite(row['loss'])
    assert 0.0 <= row['accuracy'] <= 1.0
    weights = [np.asarray(w) for w in process.get_model_weights(new_state).trainable]
    initial = [np.asarray(w) for w in model.initial_weights[0]]
    assert all(np.isfinite(w).all() for w in weights)
    assert any(not np.array_equal(a, b) for a, b in zip(weights, initial))
    if name in BUILTIN_MOMENTUM:  # the benchmarks' FedAvg: the same bits and metrics
        builtin = FedAvg(
            tiny['spec'],
            FedAvgConfig(
                batch_size=5, client_learning_rate=0.1, server_momentum=BUILTIN_MOMENTUM[name]
            ),
            10,
        )
        old_state, old_metrics = builtin.next(
            builtin.initialize(seed=0), builtin.pad(tiny['arrays'])
        )
        for a, b in zip(weights, old_state['weights']):
            assert a.tobytes() == np.asarray(b).tobytes()
        assert row['loss'] == pytest.approx(old_metrics['loss'], rel=1e-6)
        assert row['accuracy'] == pytest.approx(old_metrics['accuracy'])


def _aggregator(**table):
    return make_config(TINY, aggregator=table).aggregator


def test_the_aggregator_table_maps_to_tff_factories():
    assert isinstance(P.build_model_aggregator(_aggregator(), 4), aggregators.MeanFactory)
    assert isinstance(
        P.build_model_aggregator(_aggregator(weighted=False), 4), aggregators.UnweightedMeanFactory
    )
    clipped = P.build_model_aggregator(_aggregator(clip=0.5), 4)
    assert isinstance(clipped, aggregators.WeightedAggregationFactory)
    dp = P.build_model_aggregator(_aggregator(weighted=False, clip=0.5, noise_multiplier=0.3), 4)
    assert isinstance(dp, aggregators.DifferentiallyPrivateFactory)
    adaptive = P.build_model_aggregator(
        _aggregator(weighted=False, clip=0.5, adaptive_clip=True, noise_multiplier=0.01), 4
    )
    assert isinstance(adaptive, aggregators.DifferentiallyPrivateFactory)
    secure = P.build_model_aggregator(
        _aggregator(weighted=False, quantize_bits=8, quantize_range=1.0, secure=True), 4
    )
    assert isinstance(secure, aggregators.UnweightedAggregationFactory)
    with pytest.raises(ConfigError, match='secure = true') as e:
        P.build_model_aggregator(_aggregator(quantize_bits=8, clip=1.0), 4)
    assert e.value.key == 'aggregator.quantize_bits'


def test_dp_and_clipping_configs_run_and_report_tff_measurements(tiny):
    model = P.model_from_spec(tiny['spec'], 0)
    data = P.client_datasets(tiny['arrays'], 5)
    dp = make_config(TINY, aggregator={'weighted': False, 'clip': 0.5, 'noise_multiplier': 0.3})
    process = P.build_learning_process(dp, model)
    _, metrics = process.next(process.initialize(), data)
    assert isinstance(metrics['aggregator'], collections.OrderedDict)
    row = P.round_metrics(metrics)
    assert row['num_examples'] == 40.0
    clip = make_config(TINY, aggregator={'clip': 0.01})
    process = P.build_learning_process(clip, model)
    _, metrics = process.next(process.initialize(), data)
    row = P.round_metrics(metrics)
    assert row['clipping_norm'] == pytest.approx(0.01)
    assert row['clipped_count'] == 4.0  # every update is longer than 0.01


def test_local_epochs_repeat_each_client_s_data(tiny):
    ds = P.client_datasets(tiny['arrays'][:1], batch_size=4, local_epochs=2)[0]
    sizes = [int(x.shape[0]) for x, _ in ds]
    assert sizes == [4, 4, 2, 4, 4, 2]  # 2 passes over 10, in stored order: no batch spans two
    xs = np.concatenate([x.numpy() for x, _ in ds])
    np.testing.assert_array_equal(xs[:10], tiny['arrays'][0]['x'])
    np.testing.assert_array_equal(xs[10:], tiny['arrays'][0]['x'])


def test_a_tff_state_checkpoint_resumes_with_the_bits_of_an_uninterrupted_run(tiny, tmp_path):
    """DP with adaptive clipping: the noise seed, the clip estimate and the server optimizer's
    moments all live in the nested state, saved leaf by leaf."""
    from simharness.experiments import checkpoints as CK

    config = make_config(
        TINY,
        algorithm={'name': 'fedadam'},
        aggregator={
            'weighted': False,
            'clip': 0.5,
            'adaptive_clip': True,
            'noise_multiplier': 0.05,
        },
    )
    process = P.build_learning_process(config, P.model_from_spec(tiny['spec'], 0))
    data = P.client_datasets(tiny['arrays'], 5)
    state = process.initialize()
    state1, _ = process.next(state, data)
    straight, _ = process.next(state1, data)

    CK.save_checkpoint(tmp_path, state1, 1, {'note': 'x'})
    restored, meta = CK.latest_checkpoint(tmp_path, like=process.initialize())
    assert meta['rounds_done'] == 1 and meta['note'] == 'x'
    resumed, _ = process.next(restored, data)
    import tensorflow as tf

    a, b = tf.nest.flatten(straight), tf.nest.flatten(resumed)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    with pytest.raises(Exception, match='like='):
        CK.load_checkpoint(CK.list_checkpoints(tmp_path)[-1])


def test_a_process_by_client_ids_gives_the_bits_of_datasets_built_in_the_driver(tiny):
    from simharness.data.client_data import ArrayClientData

    cd = ArrayClientData({str(i): a for i, a in enumerate(tiny['arrays'])})
    config = make_config(TINY)
    process = P.build_learning_process(config, P.model_from_spec(tiny['spec'], 0))
    by_id = P.compose_with_client_data(process, cd, batch_size=5)
    state = process.initialize()
    direct, m1 = process.next(state, P.client_datasets(tiny['arrays'], 5))
    ids, m2 = by_id.next(state, ['0', '1', '2', '3'])
    assert P.round_metrics(m1) == P.round_metrics(m2)
    for x, y in zip(
        process.get_model_weights(direct).trainable, by_id.get_model_weights(ids).trainable
    ):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_federated_evaluation_matches_the_central_one(tiny):
    from simharness.learning import algorithms
    from simharness.learning.models import numpy_evaluate

    config = make_config(TINY)
    model = P.model_from_spec(tiny['spec'], 0)
    process = P.build_learning_process(config, model)
    state, _ = process.next(process.initialize(), P.client_datasets(tiny['arrays'], 5))
    weights = process.get_model_weights(state)
    fed = P.federated_evaluation(
        algorithms.build_fed_eval(model), weights, P.client_datasets(tiny['arrays'], 5)
    )
    x = np.concatenate([a['x'] for a in tiny['arrays']])
    y = np.concatenate([a['y'] for a in tiny['arrays']])
    loss, accuracy = numpy_evaluate(tiny['spec'], [np.asarray(w) for w in weights.trainable], x, y)
    assert fed['num_examples'] == 40.0
    assert fed['loss'] == pytest.approx(loss, rel=1e-5)
    assert fed['accuracy'] == pytest.approx(accuracy)


@pytest.mark.process
def test_by_ids_on_worker_processes_gives_the_thread_stack_s_bits(tiny, make_factory):
    """DP + adaptive clipping + FedAdam, clients by id (each worker builds its datasets)."""
    import tensorflow as tf

    import simharness
    from simharness.data.client_data import ArrayClientData

    cd = ArrayClientData({str(i): a for i, a in enumerate(tiny['arrays'])})
    config = make_config(
        TINY,
        algorithm={'name': 'fedadam'},
        aggregator={
            'weighted': False,
            'clip': 0.5,
            'adaptive_clip': True,
            'noise_multiplier': 0.05,
        },
    )
    process = P.build_learning_process(config, P.model_from_spec(tiny['spec'], 0))
    by_id = P.compose_with_client_data(process, cd, batch_size=5)
    ids = ['0', '1', '2', '3']

    def two_rounds():
        state = by_id.initialize()
        for _ in range(2):
            state, metrics = by_id.next(state, ids)
        return tf.nest.flatten(state), P.round_metrics(metrics)

    thread = two_rounds()
    with simharness.execution_context(make_factory('process-2')):
        process2 = two_rounds()
    assert thread[1] == process2[1]
    assert [np.asarray(a).tobytes() for a in thread[0]] == [
        np.asarray(b).tobytes() for b in process2[0]
    ]


def _sequence_model(input_shape, num_classes):
    import keras

    return keras.Sequential(
        [
            keras.layers.Input(input_shape, dtype='int32'),
            keras.layers.Embedding(num_classes, 4),
            keras.layers.Dense(num_classes),
        ]
    )


def test_sequence_models_leave_padding_labels_out_of_loss_and_metrics():
    """Positions labelled 0 (padding) count in neither the loss nor the metrics: inputs
    changed only there give the bits of the unchanged ones, and the accuracy is over the
    other positions."""
    rng = np.random.default_rng(0)
    arrays, changed = [], []
    for _ in range(4):
        y = rng.integers(1, 8, size=(10, 6)).astype(np.int32)
        y[:, 4:] = 0  # padding positions
        x = rng.integers(0, 8, size=(10, 6)).astype(np.int32)
        arrays.append({'x': x, 'y': y})
        other = x.copy()
        other[:, 4:] = (other[:, 4:] + 3) % 8  # the model sees each position on its own
        changed.append({'x': other, 'y': y})
    model = P.model_from_keras_builder(
        _sequence_model, (6,), 8, seed=0, y_shape=(6,), x_dtype=np.int32, ignore_label=0
    )
    process = P.build_learning_process(make_config(TINY), model)

    def one_round(data):
        state, metrics = process.next(
            process.initialize(), P.client_datasets(data, 5, x_dtype=np.int32)
        )
        return (
            [np.asarray(w) for w in process.get_model_weights(state).trainable],
            P.round_metrics(metrics),
        )

    weights, row = one_round(arrays)
    weights2, row2 = one_round(changed)
    assert [w.tobytes() for w in weights] == [w.tobytes() for w in weights2]
    assert row == row2 and row['num_examples'] == 40.0

    x = np.concatenate([a['x'] for a in arrays])
    y = np.concatenate([a['y'] for a in arrays])
    out = P.central_evaluation(model, model.initial_weights, x, y)
    logits = model.predict_on_batch(model.initial_weights, x, training=False).numpy()
    hit = (logits.argmax(-1) == y)[y != 0]
    assert out['accuracy'] == pytest.approx(hit.mean())  # padding not counted


def test_central_evaluation_matches_the_numpy_evaluator(tiny):
    from simharness.learning.models import numpy_evaluate

    model = P.model_from_spec(tiny['spec'], 3)
    x = np.concatenate([a['x'] for a in tiny['arrays']])
    y = np.concatenate([a['y'] for a in tiny['arrays']])
    out = P.central_evaluation(model, model.initial_weights, x, y, batch_size=16)
    loss, accuracy = numpy_evaluate(tiny['spec'], list(model.initial_weights[0]), x, y)
    assert out['loss'] == pytest.approx(loss, rel=1e-5)
    assert out['accuracy'] == pytest.approx(accuracy)
    assert out['num_examples'] == 40.0
