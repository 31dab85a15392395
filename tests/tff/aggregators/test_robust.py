"""Port of TFF's ``tensorflow_federated/python/aggregators/robust_test.py``.

The execution cases are TFF's, with TFF's expected values. The type-property
cases are condensed into one parametrized test (state and measurement
structures of clipping and zeroing, fixed and adaptive, weighted and not);
TFF's NormTest runs on the norm helpers of `tensor_utils`. Left out: TFF's
checks that a norm process whose types are wrong raises, beyond the two
representative cases below.
"""

import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import mean, robust, sum_factory
from simharness.aggregators import tensor_utils as tu
from simharness.templates import AggregationProcess, EstimationProcess
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

_test_struct_type = [(np.float32, (3,)), np.float32]
F32 = tff.TensorType(np.float32)
_float_at_server = tff.FederatedType(F32, tff.SERVER)
_float_at_clients = tff.FederatedType(F32, tff.CLIENTS)


def _make_test_struct_value(x):
    return [np.full(shape=[3], fill_value=x, dtype=np.float32), x]


def _clipped_mean(clip=2.0):
    return robust.clipping_factory(clip, mean.MeanFactory())


def _clipped_sum(clip=2.0):
    return robust.clipping_factory(clip, sum_factory.SumFactory())


def _zeroed_mean(clip=2.0, norm_order=2.0):
    return robust.zeroing_factory(clip, mean.MeanFactory(), norm_order)


def _zeroed_sum(clip=2.0, norm_order=2.0):
    return robust.zeroing_factory(clip, sum_factory.SumFactory(), norm_order)


@tff.federated_computation()
def _test_init_fn():
    return tff.federated_value(1.0, tff.SERVER)


def _adder(delta):
    @tff.federated_computation(_float_at_server, _float_at_clients)
    def next_fn(state, value):
        del value
        return tff.federated_map(tff.tf_computation(lambda x: x + delta, np.float32), state)

    return next_fn


@tff.federated_computation(_float_at_server)
def _test_report_fn(state):
    return state


def _test_norm_process(delta=1.0):
    return EstimationProcess(_test_init_fn, _adder(delta), _test_report_fn)


@pytest.mark.parametrize('kind', ['clipp', 'zero'])
@pytest.mark.parametrize('weighted', [False, True], ids=['sum', 'mean'])
@pytest.mark.parametrize('adaptive', [False, True], ids=['fixed', 'adaptive'])
def test_type_properties(kind, weighted, adaptive):
    inner = mean.MeanFactory() if weighted else sum_factory.SumFactory()
    norm = _test_norm_process() if adaptive else 2.0
    make = robust.clipping_factory if kind == 'clipp' else robust.zeroing_factory
    f = make(norm, inner)
    assert isinstance(
        f,
        tff.aggregators.WeightedAggregationFactory
        if weighted
        else tff.aggregators.UnweightedAggregationFactory,
    )
    value_type = tff.to_type(_test_struct_type)
    process = f.create(value_type, F32) if weighted else f.create(value_type)
    assert isinstance(process, AggregationProcess)
    inner_state = (
        collections.OrderedDict(value_sum_process=(), weight_sum_process=()) if weighted else ()
    )
    state = tff.FederatedType(
        collections.OrderedDict(
            [
                (f'{kind}ing_norm', np.float32 if adaptive else ()),
                ('inner_agg', inner_state),
                (f'{kind}ed_count_agg', ()),
            ]
        ),
        tff.SERVER,
    )
    inner_meas = collections.OrderedDict(mean_value=(), mean_weight=()) if weighted else ()
    meas = tff.FederatedType(
        collections.OrderedDict(
            [
                (f'{kind}ing', inner_meas),
                (f'{kind}ing_norm', np.float32),
                (f'{kind}ed_count', np.int32),
            ]
        ),
        tff.SERVER,
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    param = collections.OrderedDict(state=state, value=tff.FederatedType(value_type, tff.CLIENTS))
    if weighted:
        param['weight'] = tff.FederatedType(F32, tff.CLIENTS)
    expected = tff.FunctionType(
        param,
        tff.templates.MeasuredProcessOutput(state, tff.FederatedType(value_type, tff.SERVER), meas),
    )
    assert process.next.type_signature.is_equivalent_to(expected)


def test_bad_arguments_raise():
    with pytest.raises(TypeError):
        robust.clipping_factory(2, sum_factory.SumFactory())  # an int, not a float
    with pytest.raises(TypeError):
        robust.clipping_factory(2.0, 'not a factory')
    with pytest.raises(TypeError):
        robust.clipping_factory(2.0, sum_factory.SumFactory(), mean.MeanFactory())
    with pytest.raises(ValueError):
        robust.zeroing_factory(2.0, sum_factory.SumFactory(), norm_order=3.0)
    with pytest.raises(TypeError):
        _clipped_sum().create(tff.TensorType(np.int32))
    report_int = tff.federated_computation(
        lambda s: tff.federated_value(1, tff.SERVER), _float_at_server
    )
    with pytest.raises(TypeError, match='report'):
        robust.clipping_factory(
            EstimationProcess(_test_init_fn, _adder(1.0), report_int), sum_factory.SumFactory()
        )


def test_fixed_clip_sum(tff_stack):
    process = _clipped_sum().create(F32)
    output = process.next(process.initialize(), [1.0, 3.0, 5.0])
    assert_all_close(output.result, 5.0)
    assert_all_close(output.measurements['clipping_norm'], 2.0)
    assert output.measurements['clipped_count'] == 2


def test_fixed_clip_mean(tff_stack):
    process = _clipped_mean().create(F32, F32)
    output = process.next(process.initialize(), [1.0, 3.0, 5.0], [1.0, 2.0, 1.0])
    assert_all_close(output.result, 7 / 4)
    assert output.measurements['clipped_count'] == 2


def test_fixed_clip_struct(tff_stack):
    client_data = [_make_test_struct_value(v) for v in [1.0, 2.0, 3.0]]
    process = _clipped_sum(4.0).create(tff.to_type(_test_struct_type))
    output = process.next(process.initialize(), client_data)
    assert_all_close(output.result, _make_test_struct_value(5.0))
    assert_all_close(output.measurements['clipping_norm'], 4.0)
    assert output.measurements['clipped_count'] == 1
    process = _clipped_mean(4.0).create(tff.to_type(_test_struct_type), F32)
    output = process.next(process.initialize(), client_data, [1.0, 2.0, 1.0])
    assert_all_close(output.result, _make_test_struct_value(7 / 4))


def test_increasing_clip_sum_and_mean(tff_stack):
    process = _clipped_sum(_test_norm_process()).create(F32)
    state = process.initialize()
    for result, norm, count in [(3.0, 1.0, 2), (5.0, 2.0, 2), (7.0, 3.0, 1)]:
        output = process.next(state, [1.0, 3.0, 5.0])
        assert_all_close(output.result, result)
        assert_all_close(output.measurements['clipping_norm'], norm)
        assert output.measurements['clipped_count'] == count
        state = output.state
    process = _clipped_mean(_test_norm_process()).create(F32, F32)
    state = process.initialize()
    for result in [1.0, 7 / 4, 10 / 4]:
        output = process.next(state, [1.0, 3.0, 5.0], [1.0, 2.0, 1.0])
        assert_all_close(output.result, result)
        state = output.state


def test_clip_mixed_float_dtype(tff_stack):
    process = _clipped_sum(clip=3.0).create(tff.to_type((np.float16, np.float32)))
    output = process.next(process.initialize(), [(1.0, 1.0), (0.5, 0.5)])
    assert_all_close(output.result, [1.5, 1.5])
    output = process.next(process.initialize(), [(1.0, 1.0), (3.0, 4.0)])
    assert_all_close(output.result, [2.8, 3.4], atol=1e-3, rtol=1e-3)


def test_fixed_zero(tff_stack):
    process = _zeroed_sum().create(F32)
    output = process.next(process.initialize(), [1.0, 2.0, 5.0])
    assert_all_close(output.result, 3.0)
    assert_all_close(output.measurements['zeroing_norm'], 2.0)
    assert output.measurements['zeroed_count'] == 1
    process = _zeroed_mean().create(F32, F32)
    output = process.next(process.initialize(), [1.0, 2.0, 5.0], [1.0, 2.0, 2.0])
    assert_all_close(output.result, 5 / 5)


@pytest.mark.parametrize('norm_order, clip', [(2.0, 4.0), (float('inf'), 2.0)])
def test_fixed_zero_struct(tff_stack, norm_order, clip):
    client_data = [_make_test_struct_value(v) for v in [1.0, 2.0, 5.0]]
    process = _zeroed_sum(clip, norm_order).create(tff.to_type(_test_struct_type))
    output = process.next(process.initialize(), client_data)
    assert_all_close(output.result, _make_test_struct_value(3.0))
    assert output.measurements['zeroed_count'] == 1
    process = _zeroed_mean(clip, norm_order).create(tff.to_type(_test_struct_type), F32)
    output = process.next(process.initialize(), client_data, [1.0, 2.0, 2.0])
    assert_all_close(output.result, _make_test_struct_value(1.0))


def test_increasing_zero_sum(tff_stack):
    process = _zeroed_sum(_test_norm_process()).create(F32)
    state = process.initialize()
    for result, norm, count in [(0.5, 1.0, 2), (2.0, 2.0, 1), (4.5, 3.0, 0)]:
        output = process.next(state, [0.5, 1.5, 2.5])
        assert_all_close(output.result, result)
        assert_all_close(output.measurements['zeroing_norm'], norm)
        assert output.measurements['zeroed_count'] == count
        state = output.state


def test_increasing_zero_clip_sum(tff_stack):
    zeroing = EstimationProcess(_test_init_fn, _adder(0.75), _test_report_fn)
    clipping = EstimationProcess(_test_init_fn, _adder(0.25), _test_report_fn)
    process = robust.zeroing_factory(zeroing, _clipped_sum(clipping)).create(F32)
    state = process.initialize()
    expected = [
        (1.0, 1.0, 2, 0, 1.0),
        (1.75, 1.25, 2, 0, 1.0),
        (2.5, 1.5, 1, 1, 2.5),
        (3.25, 1.75, 0, 2, 4.5),
        (4.0, 2.0, 0, 1, 5.0),
    ]
    for zero_norm, clip_norm, zeroed, clipped, result in expected:
        output = process.next(state, [1.0, 2.0, 3.0])
        m = output.measurements
        assert_all_close(m['zeroing_norm'], zero_norm)
        assert_all_close(m['zeroing']['clipping_norm'], clip_norm)
        assert m['zeroed_count'] == zeroed
        assert m['zeroing']['clipped_count'] == clipped
        assert_all_close(output.result, result)
        state = output.state


@pytest.mark.parametrize('norm_order', [1.0, 2.0, float('inf')])
def test_zero_mixed_float_dtype(tff_stack, norm_order):
    process = _zeroed_sum(clip=3.0, norm_order=norm_order).create(
        tff.to_type((np.float16, np.float32))
    )
    output = process.next(process.initialize(), [(1.0, 1.0), (0.5, 0.5)])
    assert_all_close(output.result, [1.5, 1.5])
    for big in [(10.0, 1.0), (1.0, 10.0), (10.0, 10.0)]:
        output = process.next(process.initialize(), [(1.0, 1.0), big])
        assert_all_close(output.result, [1.0, 1.0])


def test_norms():
    for perm in itertools.permutations([1.0, -2.0, 2.0, -4.0]):
        v = [tf.constant(perm[0]), (tf.constant([perm[1], perm[2]]), tf.constant([perm[3]]))]
        assert np.isclose(tu.global_inf_norm(v).numpy(), 4.0)
        assert np.isclose(tu.global_l2_norm(v).numpy(), 5.0)
        assert np.isclose(tu.global_l1_norm(v).numpy(), 9.0)


def test_clip_by_global_l2_norm():
    value = [tf.constant([1.2]), tf.constant([3.5, -9.1]), tf.constant([[1.1, -1.1], [0.0, 4.2]])]
    for clip_norm in [0.0, 1.0, 100.0]:
        ours, ours_norm = robust._clip_by_global_l2_norm(value, clip_norm)
        theirs, norm = tf.clip_by_global_norm(value, clip_norm)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
        assert np.isclose(ours_norm.numpy(), norm.numpy())
