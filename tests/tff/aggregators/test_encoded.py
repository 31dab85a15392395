"""Port of TFF's ``tensorflow_federated/python/aggregators/encoded_test.py``.

Our encoders are `simharness.aggregators.encoders` (identity and uniform
quantization; te itself does not import under Keras 3). Left out:
TFF's ``hadamard_from_encoder_fn``, ``one_over_n_from_encoder_fn`` and
``state_update_from_encoder_fn`` type cases (te's Hadamard, test-only
PlusOneOverN and custom adaptive stages are not written). Added: the
``min_max`` (commutes-with-sum) path, deterministic rounding, and the same bits
on both stacks (the stochastic rounding is seeded by the value).
"""

import collections
import random

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import encoded, encoders, factory
from simharness.templates import AggregationProcess, MeasuredProcessOutput
from tests.tff.learning.algorithms import learning_test_utils as utils


def _identity_encoder_fn(value_spec):
    return encoders.as_gather_encoder(encoders.identity(), value_spec)


def _uniform_encoder_fn(value_spec):
    return encoders.as_gather_encoder(encoders.uniform_quantization(8), value_spec)


_test_struct_type = tff.to_type(((np.float32, (20,)), np.float32))


@pytest.mark.parametrize(
    'encoder_fn',
    [_identity_encoder_fn, _uniform_encoder_fn],
    ids=['identity_from_encoder_fn', 'uniform_from_encoder_fn'],
)
def test_type_properties(encoder_fn):
    encoded_f = encoded.EncodedSumFactory(encoder_fn)
    assert isinstance(encoded_f, factory.UnweightedAggregationFactory)
    process = encoded_f.create(_test_struct_type)
    assert isinstance(process, AggregationProcess)
    assert process.initialize.type_signature.parameter is None
    server_state_type = process.initialize.type_signature.result
    assert len(server_state_type.member) == 2
    assert server_state_type.placement == tff.SERVER
    expected_next_type = tff.FunctionType(
        parameter=collections.OrderedDict(
            state=server_state_type, value=tff.FederatedType(_test_struct_type, tff.CLIENTS)
        ),
        result=MeasuredProcessOutput(
            state=server_state_type,
            result=tff.FederatedType(_test_struct_type, tff.SERVER),
            measurements=tff.FederatedType((), tff.SERVER),
        ),
    )
    assert process.next.type_signature.is_equivalent_to(expected_next_type)


def test_quantize_above_threshold_negative_threshold_raises():
    with pytest.raises(ValueError):
        encoded.EncodedSumFactory.quantize_above_threshold(quantization_bits=8, threshold=-1)


@pytest.mark.parametrize('quantization_bits', [0, -1, 17], ids=['zero', 'negative', 'too_large'])
def test_quantize_above_threshold_quantization_bits_raises(quantization_bits):
    with pytest.raises(ValueError):
        encoded.EncodedSumFactory.quantize_above_threshold(
            quantization_bits=quantization_bits, threshold=10000
        )


def test_bad_arguments_raise():
    with pytest.raises(TypeError):
        encoded.EncodedSumFactory.quantize_above_threshold(quantization_bits=8.0)
    with pytest.raises(TypeError):
        encoded.EncodedSumFactory(encoder_fn=3)
    with pytest.raises(TypeError):
        encoded.EncodedSumFactory.quantize_above_threshold(threshold=0).create(
            tff.TensorType(np.int32, [3])
        )


def test_simple_sum(tff_stack):
    process = encoded.EncodedSumFactory(_identity_encoder_fn).create(tff.to_type(np.float32))
    state = process.initialize()
    for _ in range(3):
        output = process.next(state, [1.0, 2.0, 3.0])
        np.testing.assert_allclose(output.result, 6.0)
        assert output.measurements == ()
        state = output.state


def test_structure_sum(tff_stack):
    process = encoded.EncodedSumFactory(_identity_encoder_fn).create(
        tff.to_type(((np.float32, (2,)), np.float32))
    )
    state = process.initialize()
    client_data = [[[1.0, -1.0], 2.0], [[2.0, 4.0], 3.0], [[3.0, 5.0], 5.0]]
    for _ in range(3):
        output = process.next(state, client_data)
        np.testing.assert_allclose(output.result[0], [6.0, 8.0])
        np.testing.assert_allclose(output.result[1], 10.0)
        assert output.measurements == ()
        state = output.state


_PAIR_TYPE = tff.to_type([(np.float32, (3,)), (np.float32, (5,))])
_SINGLE_CLIENT = [[[0.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0]]]


def test_quantize_above_threshold_zero(tff_stack):
    process = encoded.EncodedSumFactory.quantize_above_threshold(
        quantization_bits=1, threshold=0
    ).create(_PAIR_TYPE)
    output = process.next(process.initialize(), _SINGLE_CLIENT)
    assert set(np.asarray(output.result[0]).tolist()) <= {0.0, 2.0}
    assert set(np.asarray(output.result[1]).tolist()) <= {1.0, 5.0}
    # The extremes quantize exactly.
    np.testing.assert_allclose(np.asarray(output.result[1])[[0, 4]], [1.0, 5.0])


def test_quantize_above_threshold_positive(tff_stack):
    process = encoded.EncodedSumFactory.quantize_above_threshold(
        quantization_bits=1, threshold=4
    ).create(_PAIR_TYPE)
    output = process.next(process.initialize(), _SINGLE_CLIENT)
    np.testing.assert_allclose(output.result[0], [0.0, 1.0, 2.0])
    assert set(np.asarray(output.result[1]).tolist()) <= {1.0, 5.0}


@pytest.fixture(scope='module')
def _quantize_4_bits():
    return encoded.EncodedSumFactory.quantize_above_threshold(
        quantization_bits=4, threshold=0
    ).create(tff.to_type((np.float32, (10000,))))


def test_quantize_above_threshold(tff_stack, _quantize_4_bits):
    rng = random.Random(0)
    data = [[rng.uniform(0.0, 15.0) for _ in range(9998)] + [0.0, 15.0]]
    output = _quantize_4_bits.next(_quantize_4_bits.initialize(), data)
    unique_values = sorted(set(np.asarray(output.result).tolist()))
    np.testing.assert_allclose(unique_values, [float(i) for i in range(16)])
    # Stochastic rounding is unbiased: the mean error is small.
    assert abs(float(np.mean(np.asarray(output.result) - np.asarray(data[0], np.float32)))) < 0.02


# -- ours ------------------------------------------------------------------------------------


def test_min_max_commutes_with_sum(tff_stack):
    def encoder_fn(spec):
        return encoders.as_gather_encoder(
            encoders.uniform_quantization(2, min_max=[-1.0, 2.0], stochastic=False), spec
        )

    process = encoded.EncodedSumFactory(encoder_fn).create(tff.TensorType(np.float32, [4]))
    data = [
        np.array([-3.0, 0.0, 1.0, 5.0], np.float32),
        np.array([-1.0, 0.1, 0.9, 2.0], np.float32),
    ]
    output = process.next(process.initialize(), data)
    # Levels -1, 0, 1, 2; values clipped to [-1, 2], rounded to nearest, summed.
    np.testing.assert_allclose(output.result, [-2.0, 0.0, 2.0, 4.0])


def test_deterministic_rounding_to_nearest(tff_stack):
    def encoder_fn(spec):
        return encoders.as_gather_encoder(encoders.uniform_quantization(2, stochastic=False), spec)

    process = encoded.EncodedSumFactory(encoder_fn).create(tff.TensorType(np.float32, [2, 3]))
    value = np.array([[0.0, 0.9, 1.2], [2.2, 2.9, 3.0]], np.float32)
    output = process.next(process.initialize(), [value])
    np.testing.assert_allclose(output.result, [[0.0, 1.0, 1.0], [2.0, 3.0, 3.0]])


def test_same_bits_on_stacks(stack_registry):
    process = encoded.EncodedSumFactory.quantize_above_threshold(
        quantization_bits=3, threshold=5
    ).create(tff.to_type([(np.float32, (50,)), np.float32]))
    rng = np.random.default_rng(1)
    data = [[rng.normal(size=50).astype(np.float32), np.float32(i)] for i in range(3)]

    def run():
        return process.next(process.initialize(), data).result

    result = utils.assert_same_bits_on_stacks(stack_registry, run)
    np.testing.assert_allclose(result[1], 3.0)
    np.testing.assert_allclose(result[0], np.sum([d[0] for d in data], axis=0), atol=3 * 0.7)


def test_encoder_errors():
    with pytest.raises(ValueError):
        encoders.uniform_quantization(0)
    with pytest.raises(ValueError):
        encoders.uniform_quantization(8, min_max=[1.0, 0.0])
    with pytest.raises(TypeError):
        encoders.uniform_quantization(8, stochastic=1)
    with pytest.raises(TypeError):
        encoders.uniform_quantization(8, unknown_option=True)
