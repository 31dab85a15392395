"""Port of TFF's ``tensorflow_federated/python/learning/model_update_aggregator_test.py``.

Left out: ``CompilerIntegrationTest`` (it counts the scalars of TFF's MapReduceForm; we
have no MapReduceForm compiler). Ours: the default robust aggregator and the secure
aggregator run a round on both stacks (the same bits).
"""

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import factory
from simharness.learning import model_update_aggregator
from simharness.templates import AggregationProcess
from tests.tff.learning.algorithms import learning_test_utils as utils

_FLOAT_TYPE = tff.TensorType(np.float32)
_FLOAT_MATRIX_TYPE = tff.TensorType(np.float32, [200, 300])
_ZC = pytest.mark.parametrize(
    'zeroing, clipping',
    [(False, False), (True, False), (False, True), (True, True)],
    ids=['simple', 'zeroing', 'clipping', 'zeroing_and_clipping'],
)


def _check(factory_, weighted, value_type=_FLOAT_TYPE):
    if weighted:
        assert isinstance(factory_, factory.WeightedAggregationFactory)
        process = factory_.create(value_type, _FLOAT_TYPE)
    else:
        assert isinstance(factory_, factory.UnweightedAggregationFactory)
        process = factory_.create(value_type)
    assert isinstance(process, AggregationProcess)
    assert process.is_weighted == weighted
    return process


@_ZC
@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_robust_aggregator(zeroing, clipping, weighted):
    _check(
        model_update_aggregator.robust_aggregator(
            zeroing=zeroing, clipping=clipping, weighted=weighted
        ),
        weighted,
    )


@pytest.mark.parametrize(
    'zeroing, clipping',
    [(False, False), (True, True)],
    ids=['debug_measurements', 'zeroing_clipping_debug_measurements'],
)
@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_robust_aggregator_with_debug_measurements(zeroing, clipping, weighted):
    _check(
        model_update_aggregator.robust_aggregator(
            zeroing=zeroing,
            clipping=clipping,
            weighted=weighted,
            debug_measurements_fn=tff.learning.add_debug_measurements,
        ),
        weighted,
    )


@pytest.mark.parametrize(
    'zeroing, clipping',
    [(False, False), (True, True)],
    ids=['debug_measurements', 'zeroing_clipping_debug_measurements'],
)
def test_robust_aggregator_weighted_mixed_dtype(zeroing, clipping):
    _check(
        model_update_aggregator.robust_aggregator(
            zeroing=zeroing,
            clipping=clipping,
            debug_measurements_fn=tff.learning.add_debug_measurements_with_mixed_dtype,
        ),
        True,
    )


def test_wrong_debug_measurements_fn_robust_aggregator():
    with pytest.raises(TypeError):
        model_update_aggregator.robust_aggregator(debug_measurements_fn=lambda f: [1.0])


@pytest.mark.parametrize('zeroing', [False, True], ids=['simple', 'zeroing'])
def test_dp_aggregator(zeroing):
    _check(
        model_update_aggregator.dp_aggregator(
            noise_multiplier=1e-2, clients_per_round=10, zeroing=zeroing
        ),
        weighted=False,
    )


@_ZC
@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_secure_aggregator(zeroing, clipping, weighted):
    _check(
        model_update_aggregator.secure_aggregator(
            zeroing=zeroing, clipping=clipping, weighted=weighted
        ),
        weighted,
    )


@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_secure_aggregator_only_contains_secure_aggregation(weighted):
    process = _check(
        model_update_aggregator.secure_aggregator(weighted=weighted), weighted, _FLOAT_MATRIX_TYPE
    )
    utils.assert_not_contains_unsecure_aggregation(process.next)


def test_ddp_secure_aggregator_only_contains_secure_aggregation():
    process = model_update_aggregator.ddp_secure_aggregator(
        noise_multiplier=1e-2, expected_clients_per_round=10
    ).create(_FLOAT_MATRIX_TYPE)
    utils.assert_not_contains_unsecure_aggregation(process.next)


@pytest.mark.parametrize('zeroing', [True, False], ids=['zeroing', 'no_zeroing'])
@pytest.mark.parametrize(
    'value_type', [_FLOAT_TYPE, _FLOAT_MATRIX_TYPE], ids=['float', 'float_matrix']
)
def test_ddp_secure_aggregator_unweighted(zeroing, value_type):
    _check(
        model_update_aggregator.ddp_secure_aggregator(
            noise_multiplier=1e-2, expected_clients_per_round=10, bits=16, zeroing=zeroing
        ),
        weighted=False,
        value_type=value_type,
    )


@_ZC
@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_compression_aggregator(zeroing, clipping, weighted):
    _check(
        model_update_aggregator.compression_aggregator(
            zeroing=zeroing, clipping=clipping, weighted=weighted
        ),
        weighted,
    )


def test_wrong_debug_measurements_fn_compression_aggregator():
    with pytest.raises(TypeError):
        model_update_aggregator.compression_aggregator(debug_measurements_fn=lambda f: [1.0])


# -- ours ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'build',
    [model_update_aggregator.robust_aggregator, model_update_aggregator.secure_aggregator],
    ids=['robust', 'secure'],
)
def test_aggregates_on_stacks(stack_registry, build):
    process = build().create(tff.TensorType(np.float32, [3]), _FLOAT_TYPE)
    values = [np.array([0.1, -0.2, 0.3], np.float32), np.array([0.5, 0.1, -0.1], np.float32)]
    weights = [1.0, 3.0]

    def run():
        state = process.initialize()
        return process.next(state, values, weights)

    output = utils.assert_same_bits_on_stacks(stack_registry, run)
    expected = (values[0] * 1.0 + values[1] * 3.0) / 4.0
    np.testing.assert_allclose(output.result, expected, rtol=1e-3, atol=1e-3)


def test_ddp_secure_aggregator_on_stacks(stack_registry):
    # The clients' Skellam noise is TFF's unseeded draw (fresh on every client and call), so
    # the stacks agree to within the noise, not bit for bit.
    process = model_update_aggregator.ddp_secure_aggregator(
        noise_multiplier=1e-3, expected_clients_per_round=2, bits=20
    ).create(tff.TensorType(np.float32, [3]))
    values = [np.array([0.01, -0.02, 0.03], np.float32), np.array([0.05, 0.01, -0.01], np.float32)]
    for name in ('local', 'process-2'):
        with stack_registry.open(name):
            output = process.next(process.initialize(), values)
        np.testing.assert_allclose(output.result, (values[0] + values[1]) / 2, atol=2e-3)
