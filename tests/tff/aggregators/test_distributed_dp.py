"""Port of TFF's ``tensorflow_federated/python/aggregators/distributed_dp_test.py``.

Left out: the ``distributed_dgauss`` cases (tensorflow_privacy's discrete
Gaussian sampler is not written here; choosing it raises
`NotImplementedError`, tested), ``test_auto_tuning_fails_on_non_shifted_binary_flags``
(it checks tensorflow_privacy's QuantileEstimatorQuery, ported elsewhere) and
``assert_not_contains_unsecure_aggregation`` on the type cases (checked in
test_model_update_aggregator.py for the ddp aggregator). Condensed: ``test_sum``
runs scalar / rank 2 / struct on both rotations with beta 0 and the struct with
beta exp(-0.5), one stack each for the value cases; the type cases use
the Skellam query with our fourth ``noise_seed`` field.
Added: clients with equal records draw independent noise (TFF's unseeded draws);
a query built with ``noise_seed=<int>`` gives the same bits on both stacks.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import (
    concat,
    differential_privacy,
    discretization,
    distributed_dp,
    factory,
    robust,
    rotation,
    secure,
)
from simharness.templates import AggregationProcess, EstimationProcess, MeasuredProcessOutput
from tests.tff.learning.algorithms import learning_test_utils as utils

_test_struct_type = [(np.float32, (2, 2)), np.float32]
_test_nested_struct_type = collections.OrderedDict(
    a=[np.float32, [(np.float32, (2, 2, 1))]], b=(np.float32, (3,))
)


def _make_test_nested_struct(value):
    return collections.OrderedDict(
        a=[np.array(value, np.float32), [np.full([2, 2, 1], value, np.float32)]],
        b=np.full((3,), value, np.float32),
    )


def _make_test_factory(**new_kwargs):
    kwargs = dict(noise_multiplier=0.5, expected_clients_per_round=100, bits=16, l2_clip=0.1)
    kwargs.update(new_kwargs)
    return distributed_dp.DistributedDpSumFactory(**kwargs)


def _make_onehot(value, dim=100):
    out = np.zeros([dim], np.float32)
    out[0] = value
    return out


@pytest.mark.parametrize(
    'value_type',
    [np.int64, np.float32, _test_struct_type, _test_nested_struct_type],
    ids=['int64', 'float', 'struct', 'nested_struct'],
)
def test_type_properties(value_type):
    ddp_factory = _make_test_factory()
    assert isinstance(ddp_factory, factory.UnweightedAggregationFactory)
    value_type = tff.to_type(value_type)
    process = ddp_factory.create(value_type)
    assert isinstance(process, AggregationProcess)
    dp_query = distributed_dp.DistributedSkellamSumQuery(
        l1_norm_bound=10.0, l2_norm_bound=10.0, local_stddev=10.0
    )
    dp_f = differential_privacy.DifferentiallyPrivateFactory(
        dp_query, secure.SecureModularSumFactory(2**15, True)
    )
    l2clip_f = robust.clipping_factory(
        clipping_norm=10.0, inner_agg_factory=discretization.DiscretizationFactory(dp_f)
    )
    expected_process = concat.concat_factory(
        rotation.HadamardTransformFactory(inner_agg_factory=l2clip_f)
    ).create(value_type)
    expected_state_type = expected_process.initialize.type_signature.result
    assert process.initialize.type_signature.is_equivalent_to(
        expected_process.initialize.type_signature
    )
    expected_measurements_type = collections.OrderedDict(
        l2_clip=np.float32,
        scale_factor=np.float32,
        scaled_inflated_l2=np.float32,
        scaled_local_stddev=np.float32,
        actual_num_clients=np.int32,
        padded_dim=np.int32,
        dp_query_metrics=(),
    )
    expected_next_type = tff.FunctionType(
        parameter=collections.OrderedDict(
            state=expected_state_type, value=tff.FederatedType(value_type, tff.CLIENTS)
        ),
        result=MeasuredProcessOutput(
            state=expected_state_type,
            result=tff.FederatedType(value_type, tff.SERVER),
            measurements=tff.FederatedType(expected_measurements_type, tff.SERVER),
        ),
    )
    assert process.next.type_signature.is_equivalent_to(expected_next_type)


_RAISE_CASES = [
    ('noise_multiplier', -1, ValueError),
    ('noise_multiplier', 'string', TypeError),
    ('noise_multiplier', np.array([1.0]), TypeError),
    ('expected_clients_per_round', -1, ValueError),
    ('expected_clients_per_round', 0, ValueError),
    ('expected_clients_per_round', 3.14, TypeError),
    ('expected_clients_per_round', 'string', TypeError),
    ('expected_clients_per_round', np.array([1, 2]), TypeError),
    ('bits', -1, ValueError),
    ('bits', 0, ValueError),
    ('bits', 3.14, TypeError),
    ('bits', 25, ValueError),
    ('bits', 'string', TypeError),
    ('bits', np.array([1, 2]), TypeError),
    ('l2_clip', -1.0, ValueError),
    ('l2_clip', 0.0, ValueError),
    ('l2_clip', 'string', TypeError),
    ('l2_clip', np.array([1, 2]), TypeError),
    ('modclip_prob', -1, ValueError),
    ('modclip_prob', 0, ValueError),
    ('modclip_prob', 1, ValueError),
    ('modclip_prob', 'string', TypeError),
    ('modclip_prob', np.array([1, 2]), TypeError),
    ('beta', -1, ValueError),
    ('beta', 1, ValueError),
    ('beta', 'string', TypeError),
    ('beta', np.array([1, 2]), TypeError),
    ('mechanism', -1, TypeError),
    ('mechanism', 'gaussian', ValueError),
    ('mechanism', ['distributed_dgauss'], TypeError),
    ('rotation_type', -1, TypeError),
    ('rotation_type', 'my_flat', ValueError),
    ('rotation_type', ['hd'], TypeError),
    ('auto_l2_clip', -1, TypeError),
    ('auto_l2_clip', 'string', TypeError),
    ('auto_l2_clip', [True], TypeError),
]


@pytest.mark.parametrize('name, value, error_type', _RAISE_CASES)
def test_raise_on(name, value, error_type):
    with pytest.raises(error_type):
        _make_test_factory(**{name: value})


@pytest.mark.parametrize(
    'name, value, error_type',
    [
        ('auto_l2_target_quantile', 'string', TypeError),
        ('auto_l2_target_quantile', 1.1, ValueError),
        ('auto_l2_target_quantile', -0.1, ValueError),
        ('auto_l2_lr', 'string', TypeError),
        ('auto_l2_lr', 0, ValueError),
        ('auto_l2_clip_count_stddev', 'string', TypeError),
        ('auto_l2_clip_count_stddev', -1, ValueError),
    ],
)
def test_auto_l2_args_raise_on(name, value, error_type):
    with pytest.raises(error_type):
        _make_test_factory(auto_l2_clip=True, **{name: value})


def test_dgauss_not_written():
    with pytest.raises(NotImplementedError, match='distributed_dgauss'):
        _make_test_factory(mechanism='distributed_dgauss')


@pytest.mark.parametrize(
    'value_type',
    [
        [('a', np.int32)],
        tff.SequenceType(np.int32),
        tff.FunctionType(np.int32, np.int32),
        [[[tff.SequenceType(np.int32)]]],
    ],
    ids=['plain_struct', 'sequence', 'function', 'nested_sequence'],
)
def test_tff_value_types_raise_on(value_type):
    with pytest.raises(TypeError, match='Expected `value_type` to be'):
        _make_test_factory().create(tff.to_type(value_type))


@pytest.mark.parametrize(
    'value_type', [np.bool_, np.str_, [np.str_, [np.str_]]], ids=['bool', 'string', 'string_nested']
)
def test_component_tensor_dtypes_raise_on(value_type):
    with pytest.raises(TypeError, match='must all be integers or floats'):
        _make_test_factory().create(tff.to_type(value_type))


def test_auto_l2_builds_estimation_process():
    assert isinstance(_make_test_factory(auto_l2_clip=True)._l2_clip, EstimationProcess)


_SUM_CASES = {
    'scalar': (np.float32, [-1.0, 2.0, 3.0], 4.0),
    'rank_2': (
        (np.float32, [2, 2]),
        [[[1.0, 2.0], [1.0, 2.0]], [[2.0, 1.0], [2.0, 1.0]]],
        [[3.0, 3.0], [3.0, 3.0]],
    ),
    'struct': (
        _test_nested_struct_type,
        [_make_test_nested_struct(i) for i in [-1, -2]],
        _make_test_nested_struct(-3),
    ),
}


@functools.lru_cache(maxsize=None)
def _sum_process(name, rotation_type, beta):
    value_type, client_values, _ = _SUM_CASES[name]
    return _make_test_factory(
        noise_multiplier=0,
        expected_clients_per_round=len(client_values),
        rotation_type=rotation_type,
        bits=20,
        l2_clip=10.0,
        beta=beta,
    ).create(tff.to_type(value_type))


@pytest.mark.parametrize(
    'name, rotation_type, beta',
    [
        ('scalar', 'hd', 0.0),
        ('rank_2', 'dft', 0.0),
        ('struct', 'hd', 0.0),
        ('struct', 'dft', float(np.exp(-0.5))),
    ],
)
def test_sum(tff_stack, name, rotation_type, beta):
    _, client_values, expected_sum = _SUM_CASES[name]
    process = _sum_process(name, rotation_type, beta)
    state = process.initialize()
    for _ in range(2):
        output = process.next(state, client_values)
        state = output.state
        for got, want in zip(tf.nest.flatten(output.result), tf.nest.flatten(expected_sum)):
            np.testing.assert_allclose(got, want, atol=1e-3)


@functools.lru_cache(maxsize=None)
def _auto_tuning_process(rotation_type, dim):
    ddp_factory = _make_test_factory(
        l2_clip=1.0,
        bits=20,
        noise_multiplier=0.0,
        modclip_prob=1e-4,
        expected_clients_per_round=3,
        rotation_type=rotation_type,
        auto_l2_clip=True,
        auto_l2_target_quantile=1.0,
        auto_l2_lr=1.0,
        auto_l2_clip_count_stddev=0.0,
    )
    return ddp_factory, ddp_factory.create(tff.TensorType(np.float32, [dim]))


@pytest.mark.parametrize('rotation_type', ['hd', 'dft'])
def test_auto_tuning(tff_stack, rotation_type):
    initial_clip = 1.0
    dim = 99
    padded_dim = 100.0 if rotation_type == 'dft' else 128.0
    ddp_factory, process = _auto_tuning_process(rotation_type, dim)
    state = process.initialize()
    _, discrete_state, _ = ddp_factory._unpack_state(state)
    cur_scale = discrete_state['scale_factor']
    client_data = [_make_onehot(val, dim) for val in [0.5, 1.5, 2.0]]
    output = process.next(state, client_data)
    np.testing.assert_allclose(output.result, _make_onehot(0.5 + 1.0 + 1.0, dim), atol=1e-4)
    state = output.state
    new_clip = initial_clip * np.exp(2 / 3)
    _, discrete_state, dp_state = ddp_factory._unpack_state(state)
    new_scale = discrete_state['scale_factor']
    np.testing.assert_allclose(discrete_state['prior_norm_bound'], new_clip, rtol=1e-6)
    np.testing.assert_allclose(new_scale * np.exp(2 / 3), cur_scale, atol=1e-4, rtol=1e-6)
    new_l2 = dp_state.query_state.l2_norm_bound
    np.testing.assert_allclose(new_l2 / new_scale, new_clip, atol=1e-4)
    expected_l1 = np.ceil(
        np.float32(new_l2) * np.minimum(np.float32(new_l2), np.float32(np.sqrt(padded_dim)))
    )
    # TFF's assertAllClose (rtol 1e-6, atol 0): float32 products differ in the last place.
    np.testing.assert_allclose(dp_state.query_state.l1_norm_bound, expected_l1, rtol=1e-6, atol=0)
    expected = min(new_clip, 0.5) + min(new_clip, 1.5) + min(new_clip, 2.0)
    output = process.next(output.state, client_data)
    np.testing.assert_allclose(output.result, _make_onehot(expected, dim), atol=1e-4)


@pytest.fixture(scope='module')
def _noisy_process():
    return _make_test_factory(
        l2_clip=1.0, noise_multiplier=5, expected_clients_per_round=2, bits=20
    ).create(tff.TensorType(np.float32))


def test_noisy_sum(tff_stack, _noisy_process):
    noise_mult, l2_clip, num_iterations = 5, 1.0, 12
    state = _noisy_process.initialize()
    outputs = []
    for _ in range(num_iterations):
        output = _noisy_process.next(state, [1.0, 1.0])
        outputs.append(output.result)
        state = output.state
    stddev = np.std(outputs, ddof=1)
    rtol = 4 / np.sqrt(2 * num_iterations - 2)
    np.testing.assert_allclose(stddev, noise_mult * l2_clip, rtol=rtol, atol=0)


# -- ours ------------------------------------------------------------------------------------


def _skellam_pipeline(noise_seed):
    query = distributed_dp.DistributedSkellamSumQuery(
        l1_norm_bound=10**6, l2_norm_bound=1e5, local_stddev=30.0, noise_seed=noise_seed
    )
    return differential_privacy.DifferentiallyPrivateFactory(
        query=query, record_aggregation_factory=tff.aggregators.SumFactory()
    ).create(tff.TensorType(np.int32, [64]))


def test_equal_records_draw_independent_noise(tff_stack):
    query = distributed_dp.DistributedSkellamSumQuery(
        l1_norm_bound=10**6, l2_norm_bound=1e5, local_stddev=30.0
    )
    params = query.derive_sample_params(query.initial_global_state())
    params_type = tff.tensorflow.to_type(
        tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), params)
    )

    @tff.tensorflow.computation(params_type, tff.TensorType(np.int32, [256]))
    def noised(p, record):
        return query.preprocess_record(type(params)(*p), record)

    @tff.federated_computation(
        tff.type_at_server(params_type), tff.type_at_clients(tff.TensorType(np.int32, [256]))
    )
    def each(p, records):
        return tff.federated_map(noised, (tff.federated_broadcast(p), records))

    zeros = np.zeros([256], np.int32)
    params_value = tuple(np.asarray(v) for v in params)
    first = each(params_value, [zeros] * 4)
    second = each(params_value, [zeros] * 4)
    draws = [np.asarray(d, np.float64) for d in list(first) + list(second)]
    for i in range(len(draws)):  # every client, every call: its own noise
        for j in range(i):
            assert not np.array_equal(draws[i], draws[j]), (i, j)
    # Skellam noise of variance local_stddev**2 = 900 on each of 8 x 256 coordinates.
    np.testing.assert_allclose(np.var(np.concatenate(draws)), 900.0, rtol=0.15)
    np.testing.assert_allclose(np.corrcoef(draws[0], draws[1])[0, 1], 0.0, atol=0.25)


def test_a_seeded_query_gives_the_same_bits_on_stacks(stack_registry):
    process = _skellam_pipeline(noise_seed=7)

    def two_rounds():
        state = process.initialize()
        records = [np.full([64], 3, np.int32), np.full([64], 3, np.int32)]
        first = process.next(state, records)
        second = process.next(first.state, records)
        # (the DP factory's own noise_seed field, unused by this query, is fresh per initialize)
        return first.result, second.result, second.state.query_state

    a = utils.assert_same_bits_on_stacks(stack_registry, two_rounds)
    assert not np.array_equal(a[0], a[1])  # the seed moves on each round
