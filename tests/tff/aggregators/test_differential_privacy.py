"""Port of TFF's ``tensorflow_federated/python/aggregators/differential_privacy_test.py``.

Differences: the state is ``DPAggregatorState`` with a fifth field,
``noise_seed`` (int64[2]); ``test_noise`` draws one 4000-entry vector instead
of 500 rounds of a scalar (the same statistical check, one call). The
``tree_aggregation`` cases: TFF's ``test_tree_aggregation_factory`` runs 3 of
its 6 cases (two plain, one efficient). ``tree_adaptive``: TFF's
``test_tree_adaptive_factory_estimate_clip``, plus (ours) argument checks,
the restart at ``restart_warmup`` end to end, and the same noise on every
stack. Added: the noise is the seeded stateless noise, bit for bit, on
every stack; the tree's noise too.
"""

import collections

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import differential_privacy, factory
from simharness.aggregators import tensor_utils as tu
from simharness.aggregators.privacy import quantile as quantile_query
from simharness.aggregators.privacy import query as dp_query
from simharness.templates import AggregationProcess, MeasuredProcessOutput
from tests.tff.aggregators.aggregator_test_utils import (
    MEASUREMENT_CONSTANT,
    SumPlusOneFactory,
    assert_all_close,
)

DPF = differential_privacy.DifferentiallyPrivateFactory
_test_dp_query = dp_query.GaussianSumQuery(l2_norm_clip=1.0, stddev=0.0)
_test_struct_type = [(np.float32, (2,)), np.float32]
F32 = tff.TensorType(np.float32)


@pytest.mark.parametrize('value_type', [np.float32, _test_struct_type], ids=['float', 'struct'])
@pytest.mark.parametrize('inner', [False, True], ids=['simple', 'inner'])
def test_type_properties(value_type, inner):
    f = DPF(_test_dp_query, SumPlusOneFactory() if inner else None)
    assert isinstance(f, factory.UnweightedAggregationFactory)
    value_type = tff.to_type(value_type)
    process = f.create(value_type)
    assert isinstance(process, AggregationProcess)
    query_state = tff.StructType([('l2_norm_clip', np.float32), ('stddev', np.float32)])
    inner_t = np.int32 if inner else ()
    dp_event = tff.StructType(
        [('module_name', np.str_), ('class_name', np.str_), ('noise_multiplier', np.float32)]
    )
    server_state = tff.FederatedType(
        differential_privacy.DPAggregatorState(
            query_state, inner_t, dp_event, np.bool_, tff.TensorType(np.int64, [2])
        ),
        tff.SERVER,
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, server_state))
    meas = tff.FederatedType(collections.OrderedDict(dp_query_metrics=(), dp=inner_t), tff.SERVER)
    expected = tff.FunctionType(
        collections.OrderedDict(
            state=server_state, value=tff.FederatedType(value_type, tff.CLIENTS)
        ),
        MeasuredProcessOutput(server_state, tff.FederatedType(value_type, tff.SERVER), meas),
    )
    assert process.next.type_signature.is_equivalent_to(expected)


def test_init_non_agg_factory_raises():
    with pytest.raises(TypeError):
        DPF(_test_dp_query, 'not an agg factory')
    with pytest.raises(TypeError, match='DPQuery'):
        DPF('not a query')


@pytest.mark.parametrize(
    'bad_value_type',
    [
        tff.FederatedType(np.float32, tff.SERVER),
        tff.FunctionType(None, ()),
        tff.SequenceType(np.float32),
    ],
    ids=['federated_type', 'function_type', 'sequence_type'],
)
def test_incorrect_value_type_raises(bad_value_type):
    with pytest.raises(TypeError):
        DPF(_test_dp_query).create(bad_value_type)


def test_simple_and_structure_sum(tff_stack):
    process = DPF(_test_dp_query).create(F32)
    output = process.next(process.initialize(), [0.5, 1.0, 1.5])
    assert_all_close(output.result, 2.5)
    process = DPF(_test_dp_query).create(tff.to_type([np.float32, np.float32]))
    output = process.next(process.initialize(), [[0.1, 0.2], [5 / 13, 12 / 13], [3.0, 4.0]])
    assert_all_close(output.result, [0.1 + 5 / 13 + 3 / 5, 0.2 + 12 / 13 + 4 / 5])


def test_inner_sum(tff_stack):
    process = DPF(_test_dp_query, SumPlusOneFactory()).create(F32)
    state = process.initialize()
    assert state.agg_state == 0
    client_data = [0.5, 1.0, 1.5]
    output = process.next(state, client_data)
    assert_all_close(output.result, sum(min(x, 1.0) for x in client_data) + 1.0)
    assert output.state.agg_state == 1
    assert output.measurements['dp'] == MEASUREMENT_CONSTANT


def test_adaptive_query(tff_stack):
    q = quantile_query.QuantileAdaptiveClipSumQuery(
        initial_l2_norm_clip=1.0,
        noise_multiplier=0.0,
        target_unclipped_quantile=1.0,
        learning_rate=1.0,
        clipped_count_stddev=0.0,
        expected_num_records=3.0,
        geometric_update=False,
    )
    process = DPF(q).create(F32)
    client_data = [0.5, 1.5, 2.0]
    output = process.next(process.initialize(), client_data)
    assert_all_close(output.result, 0.5 + 1.0 + 1.0)
    output = process.next(output.state, client_data)
    assert_all_close(output.result, 0.5 + 1.5 + 5 / 3)
    assert_all_close(
        output.measurements['dp_query_metrics']['clip'], 1.0 + 2 / 3 + 1 / 3, rtol=1e-5
    )


def test_extract_dp_event_from_state(tff_stack):
    process = DPF(_test_dp_query).create(F32)
    state = process.initialize()
    with pytest.raises(differential_privacy.ExtractingDpEventFromInitialStateError):
        differential_privacy.extract_dp_event_from_state(state)
    output = process.next(state, [0.0])
    event = differential_privacy.extract_dp_event_from_state(output.state)
    expected = _test_dp_query.get_noised_result(
        _test_dp_query.initial_sample_state(tu.tensor_specs(F32)),
        _test_dp_query.initial_global_state(),
    )[2]
    assert event == expected
    assert isinstance(event, dp_accounting.GaussianDpEvent)


def test_noise():
    noise = 3.14159
    process = DPF.gaussian_fixed(noise_multiplier=noise, clients_per_round=1.0, clip=1.0).create(
        tff.TensorType(np.float32, [4000])
    )
    output = process.next(process.initialize(), [np.zeros([4000], np.float32)])
    assert np.std(output.result, ddof=1) == pytest.approx(noise, rel=0.1)


def test_noise_is_seeded_stateless_noise_on_every_stack(tff_stack):
    z, clip, n, seed = 0.5, 2.0, 2.0, 11
    process = DPF.gaussian_fixed(
        noise_multiplier=z, clients_per_round=n, clip=clip, noise_seed=seed
    ).create(tff.TensorType(np.float32, [3]))
    data = [np.array([1.0, 0.0, 0.0], np.float32), np.array([0.0, 3.0, 4.0], np.float32)]
    state = process.initialize()
    assert list(state.noise_seed) == [0, seed]
    outputs = []
    for _ in range(2):
        output = process.next(state, data)
        outputs.append(output.result)
        state = output.state
    # The noise of round r: seed_r = split(state seed)[0], one leaf: split(seed_r, 1)[0].
    seed_state = tf.constant([0, seed], tf.int64)
    clipped_sum = np.array([1.0, 1.2, 1.6], np.float32)  # [0, 3, 4] clipped to norm 2
    for result in outputs:
        this_call, seed_state = tf.unstack(tf.random.experimental.stateless_split(seed_state, 2))
        leaf_seed = tf.random.experimental.stateless_split(this_call, 1)[0]
        noised = (
            clipped_sum
            + tf.random.stateless_normal([3], seed=leaf_seed, stddev=np.float32(clip * z)).numpy()
        )
        np.testing.assert_array_equal(result, noised / np.float32(n))
    assert not np.array_equal(outputs[0], outputs[1])


def test_unseeded_initialize_draws_fresh_seeds():
    process = DPF.gaussian_fixed(1.0, 1.0, 1.0).create(F32)
    assert list(process.initialize().noise_seed) != list(process.initialize().noise_seed)


def test_gaussian_cls():
    assert isinstance(DPF.gaussian_adaptive(noise_multiplier=1e-2, clients_per_round=10), DPF)
    assert isinstance(DPF.gaussian_fixed(noise_multiplier=1.0, clients_per_round=10, clip=1.0), DPF)


def test_gaussian_adaptive_end_to_end(tff_stack):
    process = DPF.gaussian_adaptive(noise_multiplier=0.1, clients_per_round=3, noise_seed=1).create(
        F32
    )
    state = process.initialize()
    output = process.next(state, [0.05, 1.0, 2.0])
    clip = output.measurements['dp_query_metrics']['clip']
    assert clip > 0.1  # two of three above the 0.1 clip: the clip grows
    event = differential_privacy.extract_dp_event_from_state(output.state)
    assert isinstance(event, dp_accounting.ComposedDpEvent)


@pytest.mark.parametrize('clip_count_stddev', [None, 5.0])
def test_adaptive_clip_noise_params(clip_count_stddev):
    value_z, stddev = differential_privacy.adaptive_clip_noise_params(2.0, 100.0, clip_count_stddev)
    assert value_z > 2.0
    assert stddev == (0.05 * 100.0 if clip_count_stddev is None else clip_count_stddev)


def test_adaptive_clip_noise_limits_as_tff():
    # TFF allows noise_multiplier < 2 * clipped_count_stddev (ours used to refuse >= stddev / 2).
    value_z, _ = differential_privacy.adaptive_clip_noise_params(1.5, 10.0, 1.0)
    assert value_z == pytest.approx((1.5**-2 - 2.0**-2) ** -0.5)
    with pytest.raises(ValueError, match='too low'):
        differential_privacy.adaptive_clip_noise_params(2.0, 10.0, 1.0)
    assert differential_privacy.adaptive_clip_noise_params(0.0, 10.0) == (0.0, 0.0)


def test_argument_checks():
    with pytest.raises(TypeError):
        DPF.gaussian_fixed(noise_multiplier=1, clients_per_round=10, clip=1.0)
    with pytest.raises(ValueError):
        DPF.gaussian_fixed(noise_multiplier=-1.0, clients_per_round=10, clip=1.0)
    with pytest.raises(ValueError):
        DPF.gaussian_adaptive(
            noise_multiplier=1.0, clients_per_round=10, target_unclipped_quantile=1.5
        )
    with pytest.raises(ValueError):
        DPF.gaussian_fixed(noise_multiplier=1.0, clients_per_round=10, clip=1.0, noise_seed=-1)


def test_tree_aggregation_inner_sum(tff_stack):
    process = DPF.tree_aggregation(
        noise_multiplier=0.0,
        l2_norm_clip=1.0,
        record_specs=F32,
        clients_per_round=1.0,
        record_aggregation_factory=SumPlusOneFactory(),
    ).create(F32)
    state = process.initialize()
    assert state.agg_state == 0
    client_data = [0.5, 1.0, 1.5]
    output = process.next(state, client_data)
    assert_all_close(output.result, sum(min(x, 1.0) for x in client_data) + 1.0)
    assert output.state.agg_state == 1
    assert output.measurements['dp'] == MEASUREMENT_CONSTANT


@pytest.mark.parametrize(
    'total_steps,expected_variance,noise_std,use_efficient',
    [(5, 8.0, 2.0, False), (7, 3.0, 1.0, False), (4, 4.0 / 7.0, 1.0, True)],
    ids=['total5_std2', 'total7_std1', 'total4_std1_eff'],
)
def test_tree_aggregation_factory(total_steps, expected_variance, noise_std, use_efficient):
    shape = [10000]
    process = DPF.tree_aggregation(
        noise_multiplier=noise_std,
        l2_norm_clip=1.0,
        record_specs=tf.TensorSpec(shape=shape, dtype=tf.float32),
        clients_per_round=1.0,
        noise_seed=1,
        use_efficient=use_efficient,
    ).create(tff.to_type((np.float32, shape)))
    state = process.initialize()
    cumsum = np.zeros(shape, np.float32)
    for _ in range(total_steps):
        output = process.next(state, [np.zeros(shape, np.float32)])
        state = output.state
        cumsum += output.result
    np.testing.assert_allclose(np.std(cumsum), np.sqrt(expected_variance), rtol=0.05)


@pytest.mark.parametrize(
    'clip_norm,noise_multiplier',
    [(-1.0, 0.0), (0.0, 0.0), (1.0, -1.0)],
    ids=['negative_clip', 'zero_clip', 'negative_noise'],
)
def test_tree_aggregation_factory_raise(clip_norm, noise_multiplier):
    with pytest.raises(ValueError, match='must be'):
        DPF.tree_aggregation(
            noise_multiplier=noise_multiplier,
            l2_norm_clip=clip_norm,
            record_specs=tf.TensorSpec([]),
            clients_per_round=10.0,
            noise_seed=1,
        )


def test_tree_aggregation_noise_is_the_same_on_every_stack(stack_registry):
    results = {}
    for name in ('local', 'process-2'):
        with stack_registry.open(name):
            process = DPF.tree_aggregation(
                noise_multiplier=1.0,
                l2_norm_clip=1.0,
                record_specs=tf.TensorSpec([8], tf.float32),
                clients_per_round=2.0,
                noise_seed=3,
            ).create(tff.to_type((np.float32, [8])))
            state, rounds = process.initialize(), []
            for _ in range(2):
                output = process.next(state, [np.ones(8, np.float32)] * 2)
                state = output.state
                rounds.append(output.result)
            results[name] = np.stack(rounds)
    assert np.array_equal(results['local'], results['process-2'])
    assert not np.array_equal(results['local'][0], np.full(8, 1.0 / np.sqrt(8), np.float32))


def test_tree_adaptive_factory_estimate_clip():
    process = DPF.tree_adaptive(
        noise_multiplier=0.0,
        clients_per_round=3,
        record_specs=tf.TensorSpec([]),
        initial_l2_norm_clip=1.0,
        restart_warmup=None,
        restart_frequency=1,
        target_unclipped_quantile=1.0,
        clip_learning_rate=1.0,
        clipped_count_stddev=0.0,
        noise_seed=1,
    ).create(F32)
    state = process.initialize()
    client_data = [0.5, 1.5, 2.5]  # two clipped in the first round
    output = process.next(state, client_data)
    assert_all_close(output.result, (0.5 + 1.0 + 1.0) / 3.0)
    # The clip grows to exp(2/3) ~ 1.95.
    output = process.next(output.state, client_data)
    assert_all_close(output.result, (0.5 + 1.5 + np.exp(2.0 / 3)) / 3.0)


def test_tree_adaptive_restarts_at_warmup_then_every_frequency():
    process = DPF.tree_adaptive(
        noise_multiplier=0.0,
        clients_per_round=3,
        record_specs=tf.TensorSpec([]),
        initial_l2_norm_clip=1.0,
        restart_warmup=2,
        restart_frequency=4,
        target_unclipped_quantile=1.0,
        clip_learning_rate=1.0,
        clipped_count_stddev=0.0,
    ).create(F32)
    state = process.initialize()
    client_data = [0.5, 1.5, 2.5]
    results, clips, estimates = [], [], []
    for _ in range(3):
        output = process.next(state, client_data)
        state = output.state
        results.append(output.result)
        clips.append(output.measurements['dp_query_metrics']['current_clip'])
        estimates.append(output.measurements['dp_query_metrics']['estimate_clip'])
    # The estimate moves every round (below: 1/3, then 2/3 of the norms);
    # the clip only at the restart after round 2 (warmup), then all are below.
    assert_all_close(estimates, [np.exp(2.0 / 3), np.e, np.e])
    assert_all_close(clips, [1.0, np.e, np.e])
    assert_all_close(results, [2.5 / 3, 2.5 / 3, 4.5 / 3])
    assert int(state.query_state.numerator_state.indicator_state) == 3


def test_tree_adaptive_argument_checks():
    spec = tf.TensorSpec([])
    for kwargs in (
        dict(noise_multiplier=-1.0),
        dict(clients_per_round=0.0),
        dict(initial_l2_norm_clip=0.0),
        dict(clip_learning_rate=-0.1),
        dict(target_unclipped_quantile=1.5),
        dict(clipped_count_stddev=-1.0),
        dict(noise_multiplier=1.0, clipped_count_stddev=0.5),  # z >= 2 * stddev
        dict(restart_warmup=8, restart_frequency=8),
    ):
        args = dict(noise_multiplier=0.1, clients_per_round=10, record_specs=spec)
        args.update(kwargs)
        with pytest.raises(ValueError):
            DPF.tree_adaptive(**args)
    factory_ = DPF.tree_adaptive(noise_multiplier=0.1, clients_per_round=10, record_specs=spec)
    assert isinstance(factory_, DPF)
    # clipped_count_stddev defaults to clients_per_round / 20 = 0.5: the count's
    # tree noise has stddev 2 * 0.5 (noise multiplier) * 0.5 (clip).
    state = factory_._query.initial_global_state().numerator_state.inner_query_state
    below_tree = state.quantile_estimator_state.below_estimate_state.numerator_state
    assert_all_close(below_tree.tree_state.value_generator_state.stddev, 0.5)


def test_tree_adaptive_noise_is_the_same_on_every_stack(stack_registry):
    results = {}
    for name in ('local', 'process-2'):
        with stack_registry.open(name):
            process = DPF.tree_adaptive(
                noise_multiplier=0.5,
                clients_per_round=2.0,
                record_specs=tf.TensorSpec([8], tf.float32),
                initial_l2_norm_clip=1.0,
                restart_warmup=1,
                restart_frequency=2,
                clipped_count_stddev=1.0,
                noise_seed=3,
            ).create(tff.to_type((np.float32, [8])))
            state, rounds = process.initialize(), []
            for _ in range(2):
                output = process.next(state, [np.ones(8, np.float32)] * 2)
                state = output.state
                rounds.append(
                    np.append(
                        output.result, output.measurements['dp_query_metrics']['current_clip']
                    )
                )
            results[name] = np.stack(rounds)
    assert np.array_equal(results['local'], results['process-2'])
    assert results['local'][1, -1] != 1.0  # the clip adapted at the restart
    assert not np.allclose(results['local'][0, :8], 1.0 / np.sqrt(8))  # noised
