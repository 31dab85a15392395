"""Port of TFF's ``tensorflow_federated/python/aggregators/quantile_estimation_test.py``.

Left out: ``test_secure_estimation_true_only_contains_secure_aggregation``
(TFF's ``computation_contains_unsecure_aggregation`` inspects its compiler's
building blocks; we have no such helper). Difference: a private (noised)
query's state has a third element, the noise seed (see
docs/tff/aggregators.md); its type is checked here.
"""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators.privacy import quantile as quantile_query
from simharness.aggregators.privacy import query as dp_query
from simharness.aggregators.quantile_estimation import PrivateQuantileEstimationProcess as QEP
from simharness.templates import EstimationProcess
from tests.tff.aggregators.aggregator_test_utils import assert_all_close


@pytest.mark.parametrize('private', [True, False], ids=['private', 'non_private'])
def test_process_type_signature(private):
    if private:
        q = quantile_query.QuantileEstimatorQuery(
            initial_estimate=1.0,
            target_quantile=0.5,
            learning_rate=1.0,
            below_estimate_stddev=0.5,
            expected_num_records=100,
            geometric_update=True,
        )
        below = tff.StructType(
            [
                (
                    'numerator_state',
                    tff.StructType([('l2_norm_clip', np.float32), ('stddev', np.float32)]),
                ),
                ('denominator', np.float32),
            ]
        )
    else:
        q = quantile_query.NoPrivacyQuantileEstimatorQuery(
            initial_estimate=1.0, target_quantile=0.5, learning_rate=1.0, geometric_update=True
        )
        below = tff.StructType([])
    query_state = tff.StructType(
        [
            ('current_estimate', np.float32),
            ('target_quantile', np.float32),
            ('learning_rate', np.float32),
            ('below_estimate_state', below),
        ]
    )
    process = QEP(q)
    parts = [query_state, tff.StructType([])]
    if private:
        parts.append(tff.TensorType(np.int64, [2]))
    server_state = tff.FederatedType(tff.StructType(parts), tff.SERVER)
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, server_state))
    assert process.report.type_signature.is_equivalent_to(
        tff.FunctionType(server_state, tff.FederatedType(np.float32, tff.SERVER))
    )
    assert process.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(
                state=server_state, value=tff.FederatedType(np.float32, tff.CLIENTS)
            ),
            server_state,
        )
    )


def test_bad_query():
    with pytest.raises(TypeError):
        QEP(dp_query.GaussianSumQuery(l2_norm_clip=1.0, stddev=1.0))


def test_bad_aggregation_factory():
    q = quantile_query.NoPrivacyQuantileEstimatorQuery(
        initial_estimate=1.0, target_quantile=0.5, learning_rate=1.0, geometric_update=True
    )
    with pytest.raises(TypeError):
        QEP(
            quantile_estimator_query=q,
            record_aggregation_factory="I'm not a record_aggregation_factory.",
        )


def test_bad_no_noise_arguments():
    with pytest.raises(TypeError):
        QEP.no_noise(initial_estimate=1, target_quantile=0.5, learning_rate=1.0)
    with pytest.raises(ValueError):
        QEP.no_noise(initial_estimate=1.0, target_quantile=1.5, learning_rate=1.0)
    with pytest.raises(ValueError):
        QEP.no_noise(initial_estimate=1.0, target_quantile=0.5, learning_rate=0.0)


@pytest.mark.parametrize('geometric_update', [False, True], ids=['arithmetic', 'geometric'])
def test_adaptation(tff_stack, geometric_update):
    initial, target, lr = 3.14159, 0.61803, 2.71828
    process = QEP(
        quantile_query.NoPrivacyQuantileEstimatorQuery(
            initial_estimate=initial,
            target_quantile=target,
            learning_rate=lr,
            geometric_update=geometric_update,
        )
    )
    state = process.initialize()
    assert_all_close(process.report(state), initial)
    state = process.next(state, [initial + 1, initial + 2])
    expected = initial * np.exp(lr * target) if geometric_update else initial + lr * target
    assert_all_close(process.report(state), expected, rtol=1e-5)


def test_no_noise_cls(tff_stack):
    process = QEP.no_noise(initial_estimate=1.0, target_quantile=0.5, learning_rate=1.0)
    assert isinstance(process, QEP)
    assert process.report(process.initialize()) == 1.0


def test_no_noise_affine_cls(tff_stack):
    process = QEP.no_noise(
        initial_estimate=1.0, target_quantile=0.5, learning_rate=1.0, multiplier=2.0, increment=1.0
    )
    assert isinstance(process, EstimationProcess)
    assert process.report(process.initialize()) == 3.0


def test_no_noise_secure_true_false_equal_results(tff_stack):
    simple = QEP.no_noise(
        initial_estimate=1.0, target_quantile=0.5, learning_rate=1.0, secure_estimation=False
    )
    secure = QEP.no_noise(
        initial_estimate=1.0, target_quantile=0.5, learning_rate=1.0, secure_estimation=True
    )
    data = [0.5, 1.5, 2.5]
    simple_state, secure_state = simple.initialize(), secure.initialize()
    for _ in range(3):
        simple_state = simple.next(simple_state, data)
        secure_state = secure.next(secure_state, data)
        assert_all_close(simple.report(simple_state), secure.report(secure_state))


def test_private_estimation_is_reproducible(tff_stack):
    q = quantile_query.QuantileEstimatorQuery(
        initial_estimate=1.0,
        target_quantile=0.5,
        learning_rate=0.2,
        below_estimate_stddev=0.5,
        expected_num_records=3.0,
        geometric_update=True,
    )
    process = QEP(q, noise_seed=7)
    runs = []
    for _ in range(2):
        state = process.initialize()
        for _ in range(2):
            state = process.next(state, [0.5, 1.5, 2.5])
        runs.append(process.report(state))
    assert runs[0] == runs[1] and runs[0] != 1.0
