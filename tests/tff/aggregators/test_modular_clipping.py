"""Port of TFF's ``tensorflow_federated/python/aggregators/modular_clipping_test.py``.

Condensed: the per-value clipping cases (14 ranges) check
`modular_clip_by_value` directly in TF; the sum cases (scalar and struct) run
through the processes on both stacks. No case left out.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import mean, modular_clipping, sum_factory
from simharness.templates import MeasuredProcessOutput

_test_struct_type = [(np.int32, (3,)), np.int32]


def _make_test_struct_value(x):
    return [np.full(shape=[3], fill_value=x, dtype=np.int32), x]


def _test_factory(lower=-2, upper=2, estimate_stddev=False):
    return modular_clipping.ModularClippingSumFactory(
        lower, upper, sum_factory.SumFactory(), estimate_stddev
    )


@pytest.mark.parametrize('estimate', [False, True])
def test_type_properties(estimate):
    value_type = tff.to_type((np.int32, (200,)))
    process = _test_factory(estimate_stddev=estimate).create(value_type)
    empty = tff.FederatedType((), tff.SERVER)
    meas = collections.OrderedDict(modclip=())
    if estimate:
        meas['estimated_stddev'] = np.float32
    assert process.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(state=empty, value=tff.FederatedType(value_type, tff.CLIENTS)),
            MeasuredProcessOutput(
                empty,
                tff.FederatedType(value_type, tff.SERVER),
                tff.FederatedType(meas, tff.SERVER),
            ),
        )
    )


def test_raises():
    with pytest.raises(TypeError):
        modular_clipping.ModularClippingSumFactory(-1.0, 1)
    with pytest.raises(ValueError):
        modular_clipping.ModularClippingSumFactory(3, 1)
    with pytest.raises(ValueError):
        modular_clipping.ModularClippingSumFactory(-(2**31), 2**31)
    with pytest.raises(TypeError):
        modular_clipping.ModularClippingSumFactory(-1, 1, mean.MeanFactory())
    with pytest.raises(TypeError):
        modular_clipping.ModularClippingSumFactory(-1, 1, estimate_stddev='yes')
    with pytest.raises(TypeError):
        _test_factory().create(tff.TensorType(np.float32))
    with pytest.raises(ValueError):
        _test_factory(estimate_stddev=True).create(tff.TensorType(np.int32))


@pytest.mark.parametrize(
    'lower, upper, value, expected',
    [
        (-5, 10, 5, 5),
        (-5, 10, -15, 0),
        (-5, 10, 20, 5),
        (-5, 10, -5, -5),
        (-5, 10, 10, -5),
        (-20, -10, -15, -15),
        (-20, -10, -25, -15),
        (-20, -10, -5, -15),
        (20, 40, 30, 30),
        (20, 40, 10, 30),
        (20, 40, 50, 30),
        (-(2**30), 2**30 - 1, 2**30 + 5, -(2**30) + 6),
        (-(2**31) + 1, 0, 5, -(2**31) + 6),
        (0, 2**31 - 1, -5, 2**31 - 6),
    ],
)
def test_clip_individual_values(lower, upper, value, expected):
    out = modular_clipping.modular_clip_by_value(tf.constant(value, tf.int32), lower, upper)
    assert int(out.numpy()) == expected


_SUM_CASES = {
    (-3, 3): [([1, -2, 1, -2], -2), ([-3, 3, 3, 3], 0)],
    (-2, 2): [([-3, 3, 5], 1), ([-4, -2, 1, 2, 7], 0)],
}


@pytest.mark.parametrize('lower, upper', list(_SUM_CASES))
def test_clip_sum(tff_stack, lower, upper):
    process = _test_factory(lower, upper).create(tff.TensorType(np.int32))
    struct_process = _test_factory(lower, upper).create(tff.to_type(_test_struct_type))
    for client_data, expected in _SUM_CASES[(lower, upper)]:
        assert process.next(process.initialize(), client_data).result == expected
        out = struct_process.next(
            struct_process.initialize(), [_make_test_struct_value(v) for v in client_data]
        )
        np.testing.assert_array_equal(out.result[0], [expected] * 3)
        assert out.result[1] == expected


@pytest.mark.parametrize('clip_range', [(-15, 15), (-20, 20), (0, 60), (-100, -20)])
def test_estimation(clip_range):
    stddev, size = 10, 1000
    lo, hi = clip_range
    rng = np.random.RandomState(1)
    g = rng.normal(loc=lo + (hi - lo) / 2, scale=stddev, size=size)
    width = hi - lo
    values = g - np.floor(g / width - lo / width) * width
    est = modular_clipping.estimate_wrapped_gaussian_stddev(tf.convert_to_tensor(values), lo, hi)
    assert est.numpy() == pytest.approx(stddev, rel=4.5 / np.sqrt(2 * size - 2))
