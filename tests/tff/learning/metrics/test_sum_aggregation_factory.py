"""TFF's learning/metrics/sum_aggregation_factory_test.py (SumThenFinalizeFactory), renamed.

Also CreateDefaultSecureSumQuantizationRangesTest and FillMissingMetricValueRangesTest
(condensed into table-driven cases). Left out: SecureSumFactoryTest and the secure variants of
the SumThenFinalizeFactory cases (secure summation is exercised by test_aggregator.py's
secure_sum_then_finalize cases; each costs seconds of tracing); the initial-values mismatch
case checks the error type only (the message is ours).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.metrics import sum_aggregation_factory as S

F32 = tff.TensorType(np.float32)


def _odict_type(pairs):
    return tff.StructType(pairs, container=collections.OrderedDict)


@tf.function
def _tf_mean(x):
    return tf.math.divide_no_nan(x[0], x[1])


_TYPE_CASES = {
    'scalar_metric': (
        collections.OrderedDict(num_examples=tf.function(func=lambda x: x)),
        _odict_type([('num_examples', F32)]),
        _odict_type([('num_examples', F32)]),
    ),
    'non_scalar_metric': (
        collections.OrderedDict(loss=_tf_mean),
        _odict_type([('loss', tff.StructType([F32, F32], container=list))]),
        _odict_type([('loss', F32)]),
    ),
    'callable': (
        tf.function(lambda x: collections.OrderedDict(mean_loss=_tf_mean(x['loss']))),
        _odict_type([('loss', tff.StructType([F32, F32], container=list))]),
        _odict_type([('mean_loss', F32)]),
    ),
}


@pytest.mark.parametrize(
    'finalizers, metrics_type, finalized_type', list(_TYPE_CASES.values()), ids=list(_TYPE_CASES)
)
def test_type_properties(finalizers, metrics_type, finalized_type):
    aggregate_factory = tff.learning.metrics.SumThenFinalizeFactory(finalizers)
    assert isinstance(aggregate_factory, tff.aggregators.UnweightedAggregationFactory)
    process = aggregate_factory.create(metrics_type)
    assert isinstance(process, tff.templates.AggregationProcess)
    state_type = tff.FederatedType(tff.StructType([tff.StructType([]), metrics_type]), tff.SERVER)
    assert process.initialize.type_signature.result.is_equivalent_to(state_type)
    next_type = process.next.type_signature
    assert next_type.parameter[0].is_equivalent_to(state_type)
    assert next_type.parameter[1].is_equivalent_to(tff.FederatedType(metrics_type, tff.CLIENTS))
    assert next_type.result.state.is_equivalent_to(state_type)
    assert next_type.result.result.is_equivalent_to(
        tff.FederatedType(tff.StructType([finalized_type, finalized_type]), tff.SERVER)
    )
    assert next_type.result.measurements.is_equivalent_to(
        tff.FederatedType(tff.StructType([]), tff.SERVER)
    )


@pytest.mark.parametrize(
    'bad_finalizers', [1.0, [tf.function(func=lambda x: x)]], ids=['float', 'list']
)
def test_incorrect_finalizers_type_raises(bad_finalizers):
    with pytest.raises(TypeError):
        tff.learning.metrics.SumThenFinalizeFactory(bad_finalizers)


@pytest.mark.parametrize(
    'bad_type',
    [
        tff.FederatedType(np.float32, tff.SERVER),
        tff.FunctionType(None, tff.StructType([])),
        tff.SequenceType(F32),
    ],
    ids=['federated_type', 'function_type', 'sequence_type'],
)
def test_incorrect_unfinalized_metrics_type_raises(bad_type):
    aggregate_factory = tff.learning.metrics.SumThenFinalizeFactory(
        collections.OrderedDict(num_examples=tf.function(func=lambda x: x))
    )
    with pytest.raises(TypeError, match='Expected .*`StructWithPythonType`'):
        aggregate_factory.create(bad_type)


def test_finalizers_and_unfinalized_metrics_type_mismatch_raises():
    aggregate_factory = tff.learning.metrics.SumThenFinalizeFactory(
        collections.OrderedDict(num_examples=tf.function(func=lambda x: x))
    )
    with pytest.raises(ValueError, match='The metric names in `metric_finalizers` do not match'):
        aggregate_factory.create(
            _odict_type(
                [
                    ('x', tff.TensorType(np.float32, [None, 2])),
                    ('y', tff.TensorType(np.float32, [None, 1])),
                ]
            )
        )


def test_unfinalized_metrics_type_and_initial_values_mismatch_raises():
    aggregate_factory = tff.learning.metrics.SumThenFinalizeFactory(
        collections.OrderedDict(num_examples=tf.function(func=lambda x: x)),
        initial_unfinalized_metrics=collections.OrderedDict(num_examples=[1.0]),
    )
    with pytest.raises(TypeError):
        aggregate_factory.create(_odict_type([('num_examples', F32)]))


def _assert_equal(a, b):
    tf.nest.map_structure(
        lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y)), a, b
    )


def test_sum_then_finalize_metrics(tff_stack):
    finalizers = collections.OrderedDict(
        num_examples=tf.function(func=lambda x: x),
        loss=tf.function(func=lambda x: tf.math.divide_no_nan(x[0], x[1])),
        custom_sum=tf.function(func=lambda x: tf.add_n(list(map(tf.math.reduce_sum, x)))),
    )
    local = collections.OrderedDict(
        num_examples=np.float32(1.0),
        loss=[np.float32(2.0), np.float32(1.0)],
        custom_sum=[np.array(1.0, np.float32), np.array([1.0, 1.0], np.float32)],
    )
    metrics_type = _odict_type(
        [
            ('num_examples', F32),
            ('loss', tff.StructType([F32, F32], container=list)),
            ('custom_sum', tff.StructType([F32, tff.TensorType(np.float32, [2])], container=list)),
        ]
    )
    process = tff.learning.metrics.SumThenFinalizeFactory(finalizers).create(metrics_type)
    state = process.initialize()
    _assert_equal(
        state[1],
        collections.OrderedDict(num_examples=0.0, loss=[0.0, 0.0], custom_sum=[0.0, np.zeros(2)]),
    )
    output = process.next(state, [local, local])
    _assert_equal(
        output.state[1],
        collections.OrderedDict(
            num_examples=2.0, loss=[4.0, 2.0], custom_sum=[2.0, np.full(2, 2.0)]
        ),
    )
    expected = collections.OrderedDict(num_examples=2.0, loss=2.0, custom_sum=6.0)
    _assert_equal(output.result[0], expected)
    _assert_equal(output.result[1], expected)
    output = process.next(output.state, [local])
    _assert_equal(
        output.result[0], collections.OrderedDict(num_examples=1.0, loss=2.0, custom_sum=3.0)
    )
    _assert_equal(
        output.result[1], collections.OrderedDict(num_examples=3.0, loss=2.0, custom_sum=9.0)
    )


def test_sum_then_finalize_metrics_with_initial_values():
    finalizers = collections.OrderedDict(
        num_examples=tf.function(func=lambda x: x),
        loss=tf.function(func=lambda x: tf.math.divide_no_nan(x[0], x[1])),
    )
    local = collections.OrderedDict(
        num_examples=np.float32(1.0), loss=[np.float32(2.0), np.float32(1.0)]
    )
    metrics_type = _odict_type(
        [('num_examples', F32), ('loss', tff.StructType([F32, F32], container=list))]
    )
    initial = collections.OrderedDict(
        num_examples=np.float32(2.0), loss=[np.float32(3.0), np.float32(2.0)]
    )
    process = tff.learning.metrics.SumThenFinalizeFactory(
        finalizers, initial_unfinalized_metrics=initial
    ).create(metrics_type)
    state = process.initialize()
    _assert_equal(state[1], initial)
    output = process.next(state, [local, local])
    _assert_equal(output.state[1], collections.OrderedDict(num_examples=4.0, loss=[7.0, 4.0]))
    _assert_equal(output.result[0], collections.OrderedDict(num_examples=2.0, loss=2.0))
    _assert_equal(output.result[1], collections.OrderedDict(num_examples=4.0, loss=1.75))
    assert S.SumThenFinalizeFactory is tff.learning.metrics.SumThenFinalizeFactory


# CreateDefaultSecureSumQuantizationRangesTest and FillMissingMetricValueRangesTest.

_INT = (0, 2**20 - 1)
_FIXED_FLOAT = (0.0, float(2**20 - 1))
_AUTO = 'auto'


def _nested_type():
    return tff.to_type(
        collections.OrderedDict(
            a=tf.TensorSpec([], tf.int64),
            b=collections.OrderedDict(
                c=tf.TensorSpec([], tf.float32),
                d=[tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32)],
            ),
        )
    )


def _check_ranges(got, expected):
    if expected == _AUTO:
        assert got[0] is None and isinstance(got[1], tff.templates.EstimationProcess)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            _check_ranges(got[k], expected[k])
    elif isinstance(expected, list):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _check_ranges(g, e)
    else:
        assert got == expected and [type(v) for v in got] == [type(v) for v in expected]


@pytest.mark.parametrize(
    'type_spec, auto, bounds, expected',
    [
        (tff.TensorType(np.float32, [3]), True, (), _AUTO),
        (tff.TensorType(np.int64, [3]), True, (), _INT),
        (tff.TensorType(np.float64, [1]), False, (), _FIXED_FLOAT),
        (
            tff.StructType([tff.TensorType(np.int64), tff.TensorType(np.float32)], container=list),
            True,
            (),
            [_INT, _AUTO],
        ),
        (
            _nested_type(),
            True,
            (),
            collections.OrderedDict(a=_INT, b=collections.OrderedDict(c=_AUTO, d=[_INT, _INT])),
        ),
        (
            _nested_type(),
            False,
            (1, 5),
            collections.OrderedDict(
                a=(1, 5), b=collections.OrderedDict(c=(1.0, 5.0), d=[(1, 5), (1, 5)])
            ),
        ),
        (tff.TensorType(np.int32, [1]), True, (1.5, 5.5), (2, 5)),
        (tff.TensorType(np.float32, [3]), False, (0.1, 0.5), (0.1, 0.5)),
    ],
    ids=[
        'float32',
        'int64',
        'float64_fixed',
        'list',
        'nested',
        'nested_user_fixed',
        'int_truncated',
        'float_user_fixed',
    ],
)
def test_default_range_construction(type_spec, auto, bounds, expected):
    got = S.create_default_secure_sum_quantization_ranges(
        type_spec, *bounds, use_auto_tuned_bounds_for_float_values=auto
    )
    _check_ranges(got, expected)


def test_default_range_errors():
    with pytest.raises(S.UnquantizableDTypeError):
        S.create_default_secure_sum_quantization_ranges(tff.TensorType(np.str_))
    with pytest.raises(ValueError, match='not wide enough'):
        S.create_default_secure_sum_quantization_ranges(tff.TensorType(np.int32), 1.5, 1.9)
    with pytest.raises(ValueError, match='greater than'):
        S.create_default_secure_sum_quantization_ranges(tff.TensorType(np.int32), 5, 1)


def test_fill_user_ranges_returns_correct_results():
    defaults = collections.OrderedDict(a=(0, 10), b=[(0.0, 1.0), (0.0, 2.0)])
    got = S.fill_missing_values_with_defaults(
        defaults, collections.OrderedDict(b=[None, (1.0, 3.0)])
    )
    assert got == collections.OrderedDict(
        a=S._MetricRange(0, 10), b=[S._MetricRange(0.0, 1.0), S._MetricRange(1.0, 3.0)]
    )


@pytest.mark.parametrize(
    'user, error',
    [
        (collections.OrderedDict(a=[0, 1]), TypeError),
        (collections.OrderedDict(a=(0, 1.0)), TypeError),
        (collections.OrderedDict(a=('x', 'y')), TypeError),
        (collections.OrderedDict(a=(0, 1, 2)), ValueError),
    ],
    ids=['list', 'mixed_types', 'strings', 'three'],
)
def test_invalid_user_ranges_raise(user, error):
    with pytest.raises(error):
        S.fill_missing_values_with_defaults(collections.OrderedDict(a=(0, 10)), user)
