"""A sum of TFF's weighted products folded as numpy makes them
(`stream_eval.scaled_sum`, `executors.leaf.numpy_elementwise`) gives TensorFlow's bits.

The fused partial must equal the map (TF's program, denormals flushed) then the
numpy fold, bit for bit, for blocks starting anywhere, on values chosen where
numpy and TF could differ: subnormal inputs (TF reads them as zero), products
that round to a subnormal (TF flushes them), overflow to infinity, signed
zeros, infinities and NaNs, integer weights too large for float32. Graphs whose
bits numpy may not give are not recognized.
"""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.executors.leaf import numpy_elementwise as ne
from simharness.core.reduction import ReductionKind
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.leaf.stream_eval import scaled_sum
from tests.unit.test_summed_map import _assert_same_partial

pytestmark = pytest.mark.skipif(
    not ne.FLUSH_AVAILABLE, reason='numpy cannot flush denormals on this platform'
)

N = 12
F32 = sh.TensorType(tf.float32, [3, 4])


def _floats(dtype, rng):
    """[N, 3, 4] values with every hard case in each client."""
    info = np.finfo(dtype)
    special = np.array(
        [info.tiny / 4, -info.tiny / 3, info.tiny, info.max / 2, -0.0, np.inf, -np.inf, np.nan],
        dtype,
    )
    with np.errstate(over='ignore'):  # huge values: infinities in float32
        x = (rng.standard_normal((N, 12)) * 10.0 ** rng.integers(-40, 40, (N, 12))).astype(dtype)
    x[:, :8] = special
    return x.reshape(N, 3, 4)


def _weights(dtype, rng):
    """One weight a client: tiny, subnormal, huge, negative zero, ordinary."""
    if np.dtype(dtype).kind == 'i':
        big = np.iinfo(dtype).max
        w = [0, 1, -7, 50, big, -big, 16_777_217, 3, 2**24 + 1, -1, 1000, 99][:N]
        return np.array(w, dtype)
    info = np.finfo(dtype)
    w = [
        1.0,
        50.0,
        info.tiny / 8,
        info.tiny * 2,
        1e30,
        -0.0,
        2.0**-60,
        -3.5,
        7e-20,
        0.5,
        1e-38,
        4.0,
    ]
    return np.array(w[:N], dtype)


def test_weighted_products_are_recognized_and_nothing_else():
    async def scalings(comps):
        with EagerTFExecutor() as ex:
            return [ex.fn_of(await ex.create_value(c, c.type_signature)).scaling for c in comps]

    @sh.tf_computation(sh.TensorType(tf.float32), F32)
    def weight_first(w, x):
        return x * w

    @sh.tf_computation(F32, sh.TensorType(tf.float64))
    def narrowed(x, w):  # the weight cast from float64
        return [x * tf.cast(w, x.dtype), x * tf.cast(w, tf.float32)]

    got = asyncio.run(
        scalings([_weighted_mul(tf.float32), _weighted_mul(tf.int64), weight_first, narrowed])
    )
    assert got == [((0, 1), 2), ((0, 1), 2), ((1,), 0), ((0, 0), 1)]


def test_ops_whose_bits_numpy_may_not_give_stay_with_tensorflow():
    @sh.tf_computation(F32, sh.TensorType(tf.float32))
    def negate(x, w):  # Neg: numpy and TF may treat a subnormal differently under DAZ
        return -x * w

    @sh.tf_computation(sh.TensorType(tf.float16, [3]), sh.TensorType(tf.float16))
    def half(x, w):  # float16 is converted in software: no flush mode
        return x * w

    @sh.tf_computation(F32, sh.TensorType(tf.float32))
    def add(x, w):
        return x * w + 1.0

    @sh.tf_computation(F32, sh.TensorType(tf.float32, [4]))
    def chain(value, scale):  # TF's graph runtime reorders it (other roundings)
        return value * scale * 3.0

    @sh.tf_computation(F32)
    def by_one(x):  # TF may drop the multiply (a subnormal x kept, or flushed)
        return x * 1.0

    @sh.tf_computation(F32, sh.TensorType(tf.float32))
    def round_trip(x, w):  # TF may drop both casts (a subnormal w kept, or flushed)
        return x * tf.cast(tf.cast(w, tf.float64), tf.float32)

    async def scalings():
        with EagerTFExecutor() as ex:
            out = []
            for comp in (negate, half, add, chain, by_one, round_trip):
                out.append(ex.fn_of(await ex.create_value(comp, comp.type_signature)).scaling)
            return out

    assert asyncio.run(scalings()) == [None] * 6


def test_the_flush_mode_is_set_only_inside_the_block():
    x = np.array([2.0**-130, 1.0], np.float32)
    with ne.denormals_flushed():
        inside = x * np.float32(1.0)
    outside = x * np.float32(1.0)
    assert inside.tolist() == [0.0, 1.0]
    assert outside[0] == np.float32(2.0**-130)


VALUE = collections.OrderedDict(a=F32, b=sh.TensorType(tf.float32, [4]))


def _weighted_mul(weight_dtype):
    @sh.tf_computation(VALUE, sh.TensorType(weight_dtype))
    def mul(value, weight):  # TFF's `_mul`, on a struct
        return tf.nest.map_structure(lambda x: x * tf.cast(weight, x.dtype), value)

    return mul


async def _scaled_and_folded(comp, values, start, total):
    with EagerTFExecutor(sums_in_calls=True) as ex:
        fn = await ex.create_value(comp, comp.type_signature)
        args = await ex.create_values(values, comp.type_signature.parameter)
        got = scaled_sum(ex, ReductionKind.SUM, fn, args, start, total)
        mapped = await ex.create_map(fn, args)
        want = await ex.create_partial_reduction(ReductionKind.SUM, mapped, start, total, {})
        return got, want


@pytest.mark.filterwarnings('ignore:invalid value encountered:RuntimeWarning')  # inf - inf
@pytest.mark.parametrize('weight_dtype', [tf.float32, tf.int64, tf.float64])
@pytest.mark.parametrize(
    'start,n,total',
    [(0, 40, 40), (0, 20, 100), (5, 30, 100), (3, 9, 100), (48, 52, 100)],
)
def test_a_sum_of_weighted_values_is_the_map_then_the_fold_bit_for_bit(
    start, n, total, weight_dtype
):
    # products that TF flushes (tiny weights, subnormal values) and sums that cancel
    rng = np.random.default_rng(start + n)
    w_np = np.dtype(weight_dtype.as_numpy_dtype)
    values = []
    for i in range(n):
        a = _floats(np.float32, rng)[i % N]
        b = _floats(np.float32, rng)[i % N, 0]
        w = _weights(w_np, rng)[i % N]
        values.append((collections.OrderedDict(a=a, b=b), w))
    got, want = asyncio.run(_scaled_and_folded(_weighted_mul(weight_dtype), values, start, total))
    assert got is not None, 'the fused fold did not apply: nothing is tested'
    _assert_same_partial(got, want)
