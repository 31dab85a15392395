"""`zero_all_if_any_non_finite` (TFF's ``tensor_utils``): the same answer as
``reduce_all(is_finite)`` for every value, in eager, graph and XLA-compiled runs.

Ours: float tensors of rank >= 1 (the last dimension known) are checked through a product
with zeros (a NaN exactly when some element is infinite or NaN), the others with
``is_finite``.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip('tensorflow')

from simharness.learning.templates._tensor_utils import (  # noqa: E402
    any_non_finite,
    zero_all_if_any_non_finite,
)

RUNS = {
    'eager': lambda f: f,
    'graph': lambda f: tf.function(f, autograph=False),
    'xla': lambda f: tf.function(f, autograph=False, jit_compile=True),
}
BAD = [np.inf, -np.inf, np.nan]
TINY = np.float32(1e-41)  # a denormal: finite


def _structure(dtype=np.float32):
    rng = np.random.default_rng(7)
    return [
        rng.normal(size=(6, 5)).astype(dtype),
        rng.normal(size=(3,)).astype(dtype),
        rng.normal(size=(2, 3, 4)).astype(dtype),
        np.asarray(2.5, dtype),
    ]


def _check(run, leaves):
    """`zero_all_if_any_non_finite`'s answer; `any_non_finite` (the server finalizer's
    check, with no matmul) must give the same flag."""
    f = RUNS[run](lambda *xs: zero_all_if_any_non_finite(list(xs)))
    out, flag = f(*[tf.constant(x) for x in leaves])
    flag_only = RUNS[run](lambda *xs: any_non_finite(list(xs)))(*[tf.constant(x) for x in leaves])
    assert int(flag_only) == int(flag), (int(flag_only), int(flag))
    return [o.numpy() for o in out], int(flag)


@pytest.mark.parametrize('run', sorted(RUNS))
@pytest.mark.parametrize(
    'leaf,index',
    [(0, (0, 0)), (0, (5, 4)), (0, (3, 2)), (1, (2,)), (2, (1, 2, 3)), (2, (0, 0, 0)), (3, ())],
)
@pytest.mark.parametrize('bad', BAD, ids=['inf', '-inf', 'nan'])
def test_one_non_finite_element_zeroes_everything(run, leaf, index, bad):
    leaves = _structure()
    leaves[leaf] = leaves[leaf].copy()
    leaves[leaf][index] = bad
    out, flag = _check(run, leaves)
    assert flag == 1
    for o, x in zip(out, leaves):
        assert o.shape == x.shape and not np.any(o)


@pytest.mark.parametrize('run', sorted(RUNS))
@pytest.mark.parametrize('dtype', [np.float16, np.float32, np.float64])
def test_finite_values_pass_unchanged(run, dtype):
    leaves = _structure(dtype)
    big = np.finfo(dtype).max
    leaves[0] = leaves[0].copy()
    leaves[0][0, :] = [big, -big, np.finfo(dtype).tiny, -0.0, 0.0]
    leaves[2] = np.full_like(leaves[2], big)  # no sum of them may overflow into a "non-finite"
    if dtype == np.float32:
        leaves[0][1, 0] = TINY
    out, flag = _check(run, leaves)
    assert flag == 0
    for o, x in zip(out, leaves):
        np.testing.assert_array_equal(o, x)


@pytest.mark.parametrize('run', sorted(RUNS))
@pytest.mark.parametrize(
    'dtype',
    [np.float16, np.float64, tf.bfloat16.as_numpy_dtype],
    ids=['float16', 'float64', 'bfloat16'],
)
def test_other_float_dtypes_see_non_finite_values(run, dtype):
    leaves = _structure(dtype)
    leaves[2] = leaves[2].copy()
    leaves[2][1, 1, 1] = np.nan
    _, flag = _check(run, leaves)
    assert flag == 1


@pytest.mark.parametrize('run', sorted(RUNS))
def test_empty_tensors_are_finite(run):
    out, flag = _check(run, [np.zeros((0, 4), np.float32), np.zeros((3, 0), np.float32)])
    assert flag == 0 and [o.shape for o in out] == [(0, 4), (3, 0)]


def test_an_unknown_last_dimension_is_checked_too():
    f = tf.function(
        lambda x: zero_all_if_any_non_finite([x])[1],
        input_signature=[tf.TensorSpec([None, None], tf.float32)],
    )
    assert int(f(tf.constant([[1.0, 2.0], [3.0, np.inf]]))) == 1
    assert int(f(tf.constant([[1.0, 2.0], [3.0, 4.0]]))) == 0
