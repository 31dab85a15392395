"""Port of TFF's ``tensorflow_federated/python/aggregators/sampling_test.py``.

The factory tests are TFF's; the reservoir helpers are checked through
``build_reservoir_type`` and the processes. Left out: TFF's tests of the
sampling computation with a fixed seed (its expected values come from its
timestamp/seed scheme; ours seeds an empty reservoir from the first value,
see the module docstring), replaced by a test that the sample is the same on
every stack and rerun, with 40 clients (several reduction chunks).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import sampling

TEST_SEED = 42


def _random_ints(n):
    return (
        tf.random.stateless_uniform(
            shape=(n,), minval=None, seed=(TEST_SEED, TEST_SEED), dtype=tf.int32
        )
        .numpy()
        .tolist()
    )


def test_build_reservoir_type():
    assert sampling.build_reservoir_type(tff.TensorType(np.int32)) == tff.to_type(
        collections.OrderedDict(
            random_seed=tff.TensorType(np.int64, [2]),
            random_values=tff.TensorType(np.int32, [None]),
            samples=tff.TensorType(np.int32, [None]),
        )
    )
    t = sampling.build_reservoir_type(
        tff.to_type(
            collections.OrderedDict(a=tff.TensorType(np.int32), b=[tff.TensorType(np.float32, [3])])
        )
    )
    assert t.samples == tff.to_type(
        collections.OrderedDict(
            a=tff.TensorType(np.int32, [None]), b=[tff.TensorType(np.float32, [None, 3])]
        )
    )
    with pytest.raises(TypeError):
        sampling.build_reservoir_type(tff.StructType([np.int32]))
    with pytest.raises(TypeError):
        sampling.build_reservoir_type(tff.SequenceType(np.int32))


@pytest.mark.parametrize('metadata', [True, False])
def test_create(metadata):
    f = sampling.UnweightedReservoirSamplingFactory(
        sample_size=10, return_sampling_metadata=metadata
    )
    f.create(tff.TensorType(np.int32))
    f.create(
        tff.to_type(
            collections.OrderedDict(
                a=tff.TensorType(np.int32),
                b=[tff.TensorType(np.float32, [3]), tff.TensorType(np.bool_)],
            )
        )
    )
    for bad in (
        tff.FunctionType(None, np.int32),
        tff.SequenceType(np.int32),
        tff.FederatedType(np.int32, tff.CLIENTS),
    ):
        with pytest.raises(TypeError, match='must be a structure of tensors'):
            f.create(bad)


def test_build_factory_fails_invalid_argument():
    for bad in (0, -1):
        with pytest.raises(ValueError):
            sampling.UnweightedReservoirSamplingFactory(sample_size=bad)
    for bad in (None, '5'):
        with pytest.raises(TypeError):
            sampling.UnweightedReservoirSamplingFactory(sample_size=bad)


@pytest.mark.parametrize('sample_size, metadata', [(2, False), (4, True)])
def test_sample_size_limits(tff_stack, sample_size, metadata):
    process = sampling.UnweightedReservoirSamplingFactory(
        sample_size=sample_size, return_sampling_metadata=metadata
    ).create(tff.TensorType(np.int32))
    output = process.next(process.initialize(), _random_ints(sample_size * 2))
    if not metadata:
        assert output.result.shape == (sample_size,)
        return
    assert 'random_seed' in output.result
    assert output.result['random_values'].shape == (sample_size,)
    assert output.result['samples'].shape == (sample_size,)


def test_unfilled_reservoir(tff_stack):
    values = _random_ints(3)
    process = sampling.UnweightedReservoirSamplingFactory(sample_size=4).create(
        tff.TensorType(np.int32)
    )
    assert sorted(process.next(process.initialize(), values).result) == sorted(values)
    process = sampling.UnweightedReservoirSamplingFactory(
        sample_size=4, return_sampling_metadata=True
    ).create(tff.TensorType(np.int32))
    result = process.next(process.initialize(), values).result
    assert result['random_values'].shape[0] == 3
    assert sorted(result['samples']) == sorted(values)


def test_measurements(tff_stack):
    process = sampling.UnweightedReservoirSamplingFactory(sample_size=1).create(
        tff.TensorType(np.float32)
    )
    output = process.next(process.initialize(), [1.0, np.nan, np.inf, 2.0, 3.0])
    assert output.measurements == 2
    process = sampling.UnweightedReservoirSamplingFactory(sample_size=1).create(
        tff.to_type(
            collections.OrderedDict(
                a=tff.TensorType(np.float32),
                b=[tff.TensorType(np.float32, [2, 2]), tff.TensorType(np.bool_)],
            )
        )
    )
    output = process.next(
        process.initialize(),
        [
            collections.OrderedDict(a=1.0, b=[[[1.0, np.nan], [np.inf, 4.0]], True]),
            collections.OrderedDict(a=2.0, b=[[[1.0, 2.0], [3.0, 4.0]], False]),
            collections.OrderedDict(a=np.inf, b=[[[np.nan, 2.0], [3.0, 4.0]], True]),
        ],
    )
    assert output.measurements == collections.OrderedDict(a=1, b=[2, 0])


_EXPECTED = {}


def test_sample_is_a_function_of_the_values(tff_stack):
    values = list(range(100, 140))
    process = sampling.UnweightedReservoirSamplingFactory(sample_size=5).create(
        tff.TensorType(np.int32)
    )
    first = process.next(process.initialize(), values).result.tolist()
    assert len(set(first)) == 5 and set(first) <= set(values)
    assert process.next(process.initialize(), values).result.tolist() == first
    # The same sample on every stack (the thread stack runs first).
    assert _EXPECTED.setdefault('sample', first) == first
