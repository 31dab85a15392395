"""Port of TFF's ``tensorflow_federated/python/learning/metrics/sampling_aggregation_factory_test.py``.

No case left out. The bad-type message is matched as
``Expected .*`StructWithPythonType``` (ours does not name the
``federated_language`` module). The processes are traced once per (sample
size, finalizer kind) for the module (`_process`). Ours after TFF's: the
samples are the same bits on both stacks, and a sample's entries come from
one client.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.metrics import sampling_aggregation_factory


def _create_metric_finalizers():
    return collections.OrderedDict(
        accuracy=tf.function(func=lambda x: x),
        loss=tf.function(func=lambda x: tf.math.divide_no_nan(x[0], x[1])),
        custom_sum=tf.function(func=lambda x: tf.add_n(list(map(tf.math.reduce_sum, x)))),
    )


def _create_functional_metric_finalizers():
    def functional_metric_finalizers(unfinalized_metrics):
        return collections.OrderedDict(
            accuracy=unfinalized_metrics['accuracy'],
            loss=tf.math.divide_no_nan(
                unfinalized_metrics['loss'][0], unfinalized_metrics['loss'][1]
            ),
            custom_sum=tf.add_n(list(map(tf.math.reduce_sum, unfinalized_metrics['custom_sum']))),
        )

    return functional_metric_finalizers


_METRICS_TYPE = tff.StructWithPythonType(
    [
        ('accuracy', tff.TensorType(np.float32)),
        ('loss', tff.TensorType(np.float32, (2,))),
        (
            'custom_sum',
            [tff.TensorType(np.float32, shape=(1,)), tff.TensorType(np.float32, shape=(2,))],
        ),
    ],
    collections.OrderedDict,
)


@functools.lru_cache(maxsize=None)
def _create_random_unfinalized_metrics(seed):
    metrics = collections.OrderedDict(
        accuracy=tf.random.stateless_uniform(shape=(), seed=[seed, seed]).numpy(),
        loss=tf.random.stateless_uniform(shape=(2,), seed=[seed, seed]).numpy(),
        custom_sum=[
            tf.random.stateless_uniform(shape=(1,), seed=[seed, seed]).numpy(),
            tf.random.stateless_uniform(shape=(2,), seed=[seed, seed]).numpy(),
        ],
    )
    return metrics, _METRICS_TYPE


def _create_finalized_clients_metrics(metric_finalizers, list_clients_unfinalized_metrics):
    total = collections.OrderedDict({name: [] for name in metric_finalizers})
    for unfinalized_metrics in list_clients_unfinalized_metrics:
        for name in metric_finalizers:
            total[name].append(_finalized(metric_finalizers[name], unfinalized_metrics, name))
    return total


_FINALIZED = {}


def _finalized(finalizer, unfinalized_metrics, name):
    # Each client's finalized metrics once (the rounds repeat clients).
    key = (id(finalizer), id(unfinalized_metrics), name)
    if key not in _FINALIZED:
        value = (
            finalizer(unfinalized_metrics) if name is None else finalizer(unfinalized_metrics[name])
        )
        _FINALIZED[key] = (finalizer, unfinalized_metrics, tf.nest.map_structure(np.asarray, value))
    return _FINALIZED[key][2]


def _create_functional_finalized_clients_metrics(
    metric_finalizers, list_clients_unfinalized_metrics
):
    total = collections.OrderedDict({name: [] for name in list_clients_unfinalized_metrics[0]})
    for unfinalized_metrics in list_clients_unfinalized_metrics:
        for name, metric in _finalized(metric_finalizers, unfinalized_metrics, None).items():
            total[name].append(metric)
    return total


@pytest.mark.parametrize(
    'bad_sample_size,error_type,message',
    [
        (0, ValueError, 'must be positive'),
        (-1, ValueError, 'must be positive'),
        (None, TypeError, 'sample_size'),
        ('5', TypeError, 'sample_size'),
    ],
    ids=['zero', 'negative', 'none', 'string'],
)
def test_build_factory_fails_with_invalid_sample_size(bad_sample_size, error_type, message):
    with pytest.raises(error_type, match=message):
        sampling_aggregation_factory.FinalizeThenSampleFactory(sample_size=bad_sample_size)


@pytest.mark.parametrize(
    'bad_metric_finalizers',
    [
        1.0,
        [tf.function(func=lambda x: x), tf.function(func=lambda x: x + 1)],
    ],
    ids=['float', 'list'],
)
def test_create_process_fails_with_invalid_metric_finalizers(bad_metric_finalizers):
    with pytest.raises(TypeError, match='metric_finalizers'):
        sampling_aggregation_factory.FinalizeThenSampleFactory(sample_size=10).create(
            bad_metric_finalizers, _METRICS_TYPE
        )


@pytest.mark.parametrize(
    'bad_unfinalized_metrics_type',
    [
        tff.FederatedType(np.float32, tff.SERVER),
        tff.FunctionType(None, ()),
        tff.SequenceType(np.float32),
    ],
    ids=['federated_type', 'function_type', 'sequence_type'],
)
def test_create_process_fails_with_invalid_unfinalized_metrics_type(bad_unfinalized_metrics_type):
    with pytest.raises(TypeError, match='Expected .*`StructWithPythonType`'):
        sampling_aggregation_factory.FinalizeThenSampleFactory(sample_size=10).create(
            _create_metric_finalizers(), bad_unfinalized_metrics_type
        )


def test_create_process_fails_with_mismatch_finalizers_and_metrics_type():
    metric_finalizers = collections.OrderedDict(num_examples=tf.function(func=lambda x: x))
    with pytest.raises(
        ValueError, match='The metric names in `metric_finalizers` do not match those'
    ):
        sampling_aggregation_factory.FinalizeThenSampleFactory(sample_size=10).create(
            metric_finalizers, _METRICS_TYPE
        )


@functools.lru_cache(maxsize=None)
def _process(sample_size, functional):
    finalizers = (
        _create_functional_metric_finalizers() if functional else _create_metric_finalizers()
    )
    process = sampling_aggregation_factory.FinalizeThenSampleFactory(sample_size).create(
        finalizers, _METRICS_TYPE
    )
    return finalizers, process


def _assert_contains_subset(samples, values):
    for s in samples:
        assert any(np.allclose(s, v, rtol=1e-6, atol=1e-6) for v in values), (s, values)


def _run_rounds(sample_size, num_clients_per_round, functional, total_rounds=5):
    metric_finalizers, sampling_process = _process(sample_size, functional)
    create_finalized = (
        _create_functional_finalized_clients_metrics
        if functional
        else _create_finalized_clients_metrics
    )
    state = sampling_process.initialize()
    total_rounds_client_values = []
    outputs = []
    for round_i in range(total_rounds):
        current = [
            _create_random_unfinalized_metrics(seed=round_i + client_i)[0]
            for client_i in range(num_clients_per_round)
        ]
        total_rounds_client_values.extend(current)
        output = sampling_process.next(state, current)
        state = output.state
        outputs.append(output)
        current_round_samples, total_rounds_samples = output.result
        current_finalized = create_finalized(metric_finalizers, current)
        total_finalized = create_finalized(metric_finalizers, total_rounds_client_values)
        for name in current_finalized:
            assert len(current_round_samples[name]) == min(sample_size, num_clients_per_round)
            _assert_contains_subset(current_round_samples[name], current_finalized[name])
            assert len(total_rounds_samples[name]) == min(
                sample_size, num_clients_per_round * (round_i + 1)
            )
            _assert_contains_subset(total_rounds_samples[name], total_finalized[name])
    return outputs


@pytest.mark.parametrize(
    'sample_size,num_clients_per_round,functional',
    [
        (5, 2, False),
        (3, 3, False),
        (2, 3, False),
        (5, 2, True),
        (3, 3, True),
        (2, 3, True),
    ],
    ids=[
        'sample_size_larger_than_per_round_clients',
        'sample_size_equal_per_round_clients',
        'sample_size_smaller_than_per_round_clients',
        'sample_size_larger_than_per_round_clients_functional',
        'sample_size_equal_per_round_clients_functional',
        'sample_size_smaller_than_per_round_clients_functional',
    ],
)
def test_finalize_then_sample_returns_expected_samples(
    tff_stack, sample_size, num_clients_per_round, functional
):
    _run_rounds(sample_size, num_clients_per_round, functional)


@functools.lru_cache(maxsize=None)
def _loss_process(sample_size):
    return sampling_aggregation_factory.FinalizeThenSampleFactory(sample_size).create(
        lambda x: x, tff.StructWithPythonType([('loss', np.float32)], collections.OrderedDict)
    )


@pytest.mark.parametrize(
    'sample_size',
    [6, 5, 1],
    ids=[
        'sample_size_larger_than_per_round_clients',
        'sample_size_equal_per_round_clients',
        'sample_size_smaller_than_per_round_clients',
    ],
)
def test_finalize_then_sample_returns_correct_measurements(tff_stack, sample_size):
    sampling_process = _loss_process(sample_size)
    state = sampling_process.initialize()
    output = sampling_process.next(
        state, [collections.OrderedDict(loss=v) for v in [1.0, np.nan, np.inf, 2.0, 3.0]]
    )
    # Two clients' values are non-finite, counted before sampling.
    assert output.measurements == collections.OrderedDict(loss=np.array(2, dtype=np.int64))
    output = sampling_process.next(
        output.state, [collections.OrderedDict(loss=v) for v in [1.0, 4.0, np.inf, 2.0, 3.0]]
    )
    assert output.measurements == collections.OrderedDict(loss=np.array(1, dtype=np.int64))


# Ours after TFF's.


def test_state_and_result_types():
    _, process = _process(2, False)
    state_type = process.next.type_signature.parameter[0].member
    assert list(state_type.names) == ['random_seed', 'random_values', 'samples']
    assert state_type.random_values == tff.TensorType(np.int32, [None])
    result_type = process.next.type_signature.result.result.member
    assert result_type[0] == result_type[1]
    assert result_type[0].loss == tff.TensorType(np.float32, [None])


_SAMPLES = {}


def test_samples_are_one_clients_and_the_same_on_every_stack(tff_stack):
    outputs = _run_rounds(2, 3, False, total_rounds=2)
    got = [tf.nest.map_structure(np.asarray, tuple(o.result)) for o in outputs]
    # Each sampled index holds one client's finalized metrics.
    current, _ = got[0]
    clients = [_create_random_unfinalized_metrics(seed=c)[0] for c in range(3)]
    finalized = _create_finalized_clients_metrics(_create_metric_finalizers(), clients)
    for i in range(2):
        matches = [
            c for c in range(3) if np.isclose(current['accuracy'][i], finalized['accuracy'][c])
        ]
        assert len(matches) == 1
        c = matches[0]
        np.testing.assert_allclose(current['loss'][i], finalized['loss'][c], rtol=1e-6)
        np.testing.assert_allclose(current['custom_sum'][i], finalized['custom_sum'][c], rtol=1e-6)
    first = _SAMPLES.setdefault('first', got)
    tf.nest.map_structure(np.testing.assert_array_equal, got, first)
