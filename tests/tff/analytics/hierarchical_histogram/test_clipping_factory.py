"""Port of TFF's ``analytics/hierarchical_histogram/clipping_factory_test.py``.

All cases but: ``test_sub_sample_clip_factory`` and ``test_distinct_clip_factory``
(one parameterized ``test_clip_factory`` here) run 2 of TFF's 4 shapes each
(``2_5_5`` and ``5_10_5`` for sub-sampling, ``1_1_1`` and ``3_1_5`` for
distinct; each case traces and runs a process). Added: the clipped histograms are
sub-histograms of the input, small histograms pass unchanged (or uniquified),
and ``cast_to_float`` feeds float32 to the inner factory.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import factory
from simharness.analytics.hierarchical_histogram import clipping_factory
from simharness.templates import AggregationProcess, MeasuredProcessOutput


@pytest.mark.parametrize('clip_mechanism', ['sub-sampling', 'distinct'])
def test_clip(clip_mechanism):
    clip_factory = clipping_factory.HistogramClippingSumFactory(clip_mechanism, 1)
    assert isinstance(clip_factory, factory.UnweightedAggregationFactory)
    value_type = tff.TensorType(np.int32, shape=(2,))
    process = clip_factory.create(value_type)
    assert isinstance(process, AggregationProcess)
    state_type = tff.FederatedType((), tff.SERVER)
    assert process.initialize.type_signature.is_equivalent_to(
        tff.FunctionType(parameter=None, result=state_type)
    )
    expected_next_type = tff.FunctionType(
        parameter=collections.OrderedDict(
            state=state_type, value=tff.FederatedType(value_type, tff.CLIENTS)
        ),
        result=MeasuredProcessOutput(
            state_type, tff.FederatedType(value_type, tff.SERVER), tff.FederatedType((), tff.SERVER)
        ),
    )
    assert process.next.type_signature.is_equivalent_to(expected_next_type)


@pytest.mark.parametrize(
    'clip_mechanism, max_records_per_user',
    [('invalid', 1), ('sub-sampling', 0)],
    ids=['invalid_clip_mechanism', 'invalid_max_records_per_user'],
)
def test_raises_value_error(clip_mechanism, max_records_per_user):
    with pytest.raises(ValueError):
        clipping_factory.HistogramClippingSumFactory(
            clip_mechanism=clip_mechanism, max_records_per_user=max_records_per_user
        ).create(tff.to_type((np.int32, (2,))))


@pytest.mark.parametrize(
    'value_type',
    [((np.int32, (2,)), np.int32), (np.float32, (2,))],
    ids=['struct_value_type', 'float_value_type'],
)
def test_raises_type_error(value_type):
    with pytest.raises(TypeError):
        clipping_factory.HistogramClippingSumFactory().create(tff.to_type(value_type))


@pytest.mark.parametrize('value_shape, sample_num', [(1, 1), (2, 5), (3, 1), (5, 10)])
def test_sub_sample_clip(value_shape, sample_num):
    histogram = np.arange(value_shape, dtype=int)
    clipped = clipping_factory._sub_sample_clip(
        tf.constant(histogram, dtype=tf.int32), sample_num
    ).numpy()
    assert clipped.sum() == min(np.linalg.norm(histogram, ord=1), sample_num)
    assert np.all((clipped >= 0) & (clipped <= histogram))


@pytest.mark.parametrize('value_shape, sample_num', [(1, 1), (2, 5), (3, 1), (5, 10)])
def test_distinct_clip(value_shape, sample_num):
    histogram = np.arange(value_shape, dtype=int)
    clipped = clipping_factory._distinct_clip(
        tf.constant(histogram, dtype=tf.int32), sample_num
    ).numpy()
    assert set(clipped.tolist()) <= {0, 1}
    assert clipped.sum() == min(np.linalg.norm(histogram, ord=0), sample_num)
    assert np.all(clipped <= histogram)


def test_sub_sample_clip_keeps_small_histograms():
    histogram = tf.constant([1, 2, 0, 1], tf.int32)
    np.testing.assert_array_equal(clipping_factory._sub_sample_clip(histogram, 4), histogram)
    np.testing.assert_array_equal(clipping_factory._distinct_clip(histogram, 3), [1, 1, 0, 1])


@pytest.mark.parametrize(
    'clip_mechanism, value_shape, max_records_per_user, num_clients',
    [
        ('sub-sampling', 2, 5, 5),
        ('sub-sampling', 5, 10, 5),
        ('distinct', 1, 1, 1),
        ('distinct', 3, 1, 5),
    ],
)
def test_clip_factory(tff_stack, clip_mechanism, value_shape, max_records_per_user, num_clients):
    client_records = [np.arange(value_shape, dtype=int).tolist() for _ in range(num_clients)]
    process = clipping_factory.HistogramClippingSumFactory(
        clip_mechanism=clip_mechanism, max_records_per_user=max_records_per_user
    ).create(tff.TensorType(np.int32, shape=(value_shape,)))
    clipped = process.next(process.initialize(), client_records).result
    order = 1 if clip_mechanism == 'sub-sampling' else 0
    expected_l1_norm = np.sum(
        [min(np.linalg.norm(x, ord=order), max_records_per_user) for x in client_records]
    )
    assert np.sum(clipped) == expected_l1_norm
    assert np.all(clipped <= np.sum(client_records, axis=0))


def test_cast_to_float_feeds_float_to_the_inner_factory(tff_stack):
    process = clipping_factory.HistogramClippingSumFactory(
        max_records_per_user=10, cast_to_float=True
    ).create(tff.TensorType(np.int32, (3,)))
    assert process.next.type_signature.result.result.member == tff.TensorType(np.float32, (3,))
    result = process.next(process.initialize(), [[1, 2, 3], [0, 1, 0]]).result
    np.testing.assert_array_equal(result, np.array([1.0, 3.0, 3.0], np.float32))
