"""Shared cases of TFF's optimizer tests (TFF's ``optimizer_test_utils.py`` and the cases
every ``<optimizer>_test.py`` repeats), as plain functions the test modules call."""

from __future__ import annotations

from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

_TEST_MATRIX = [
    [3.05979016, -0.67965499, -2.51916374, -0.98797549, -1.23950244],
    [-0.67965499, 3.65246689, -0.47892836, -1.56662479, -0.27436542],
    [-2.51916374, -0.47892836, 7.12618873, 4.98172794, 3.10724048],
    [-0.98797549, -1.56662479, 4.98172794, 4.259855, 1.48831719],
    [-1.23950244, -0.27436542, 3.10724048, 1.48831719, 4.52992126],
]
_INITIAL_W = [[-0.60170661], [1.85227818], [-0.01349722], [-1.05771093], [0.82254491]]

SCALAR_SPEC = tf.TensorSpec([1], tf.float32)
STRUCT_SPEC = [tf.TensorSpec([2], tf.float32), tf.TensorSpec([3], tf.float32)]
NESTED_SPEC = [
    tf.TensorSpec([10], tf.float32),
    [tf.TensorSpec([20], tf.float32), [tf.TensorSpec([30], tf.float32)]],
]
SPECS = {'scalar_spec': SCALAR_SPEC, 'struct_spec': STRUCT_SPEC, 'nested_spec': NESTED_SPEC}
EMPTY_TREES = {'empty_list': [], 'empty_dict': {}, 'empty_nested_structure': [([], []), {}]}


def test_quadratic_problem() -> tuple[Callable, Callable, Callable]:
    """``(initial_w, f, grad_f)`` of ``f(w) = w^T A w / 2`` in 5 dimensions (optimum 0)."""

    def fn(w: Any) -> Any:
        a = tf.constant(_TEST_MATRIX, tf.float32)
        return tf.matmul(tf.matmul(w, a, transpose_a=True), w) / 2

    def grad_fn(w: Any) -> Any:
        return tf.matmul(tf.constant(_TEST_MATRIX, tf.float32), w)

    return (lambda: tf.constant(_INITIAL_W, tf.float32)), fn, grad_fn


test_quadratic_problem.__test__ = False  # a helper, not a test


def ones(spec: Any) -> Any:
    return tf.nest.map_structure(lambda s: tf.ones(s.shape, s.dtype), spec)


def history(optimizer: Any, spec: Any, weights: Any, gradients: Any, steps: int = 4) -> list:
    state = optimizer.initialize(spec)
    out = [weights]
    for _ in range(steps):
        state, weights = optimizer.next(state, weights, gradients)
        out.append(weights)
    return out


def assert_history(got: list, expected: list, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(
        np.stack([np.asarray(w) for w in got]), np.asarray(expected), rtol=rtol, atol=atol
    )


def assert_all_close(a: Any, b: Any, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    tf.nest.assert_same_structure(a, b)
    for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def check_executes_with(optimizer: Any, spec: Any) -> None:
    weights, gradients = ones(spec), ones(spec)
    state = optimizer.initialize(spec)
    for _ in range(10):
        state, weights = optimizer.next(state, weights, gradients)
    for w in tf.nest.flatten(weights):
        assert np.all(np.isfinite(w.numpy()))


def check_skips_none_gradients(optimizer: Any, spec: Any, step_key: str = '') -> None:
    """None gradients leave weights and state alone (but for the step count, `step_key`)."""
    weights = ones(spec)
    gradients = tf.nest.map_structure(lambda s: None, spec)
    state = optimizer.initialize(spec)
    new_state, new_weights = optimizer.next(state, weights, gradients)
    if step_key:
        state[step_key] += 1
    assert_all_close(weights, new_weights, 0, 0)
    assert_all_close(state, new_state, 0, 0)


def check_empty_tree(optimizer: Any, structure: Any, step_key: str = '') -> None:
    state = optimizer.initialize(structure)
    new_state, new_weights = optimizer.next(state, structure, structure)
    if step_key:
        state[step_key] += 1
    assert_all_close(new_state, state, 0, 0)
    assert new_weights == structure


def check_indexed_slices(optimizer: Any, expected: Any) -> None:
    weights = tf.ones([4, 2])
    gradients = tf.IndexedSlices(
        values=tf.constant([[1.0, 1.0], [1.0, 1.0]]),
        indices=tf.constant([0, 2]),
        dense_shape=tf.constant([4, 2]),
    )
    state = optimizer.initialize(tf.TensorSpec([4, 2]))
    _, weights = optimizer.next(state, weights, gradients)
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-6, atol=1e-6)


def check_convergence(optimizer: Any, steps: int = 100, below: float = 0.005) -> None:
    init_w, fn, grad_fn = test_quadratic_problem()
    weights = init_w()
    assert fn(weights) > 5.0
    state = optimizer.initialize(tf.TensorSpec(weights.shape, weights.dtype))
    for _ in range(steps):
        state, weights = optimizer.next(state, weights, grad_fn(weights))
    assert fn(weights) < below


def assert_optimizers_numerically_close(
    tff_optimizer_fn: Callable, keras_optimizer_fn: Callable, steps: int = 10
) -> None:
    """TFF's comparison with Keras: [10, 2] and [2] weights, 10 random gradients."""
    specs = [tf.TensorSpec([10, 2], tf.float32), tf.TensorSpec([2], tf.float32)]
    gen = tf.random.Generator.from_seed(2021)

    def random_vector() -> list:
        return [gen.normal(shape=s.shape, dtype=s.dtype) for s in specs]

    initial = random_vector()
    gradients = [random_vector() for _ in range(steps)]
    optimizer = tff_optimizer_fn()
    state, weights = optimizer.initialize(specs), list(initial)
    for g in gradients:
        state, weights = optimizer.next(state, weights, g)
    variables = [keras.Variable(v) for v in initial]
    keras_optimizer = keras_optimizer_fn()
    for g in gradients:
        keras_optimizer.apply_gradients(zip(g, variables))
    assert_all_close(weights, [v.numpy() for v in variables], rtol=5e-5, atol=5e-5)


def check_mismatch_raises(optimizer: Any, spec: Any = SCALAR_SPEC) -> None:
    import pytest  # pylint: disable=import-outside-toplevel

    state = optimizer.initialize(spec)
    with pytest.raises(ValueError):
        optimizer.next(state, tf.zeros([1]), tf.zeros([2]))
    with pytest.raises(ValueError):
        optimizer.next(state, tf.zeros([2]), tf.zeros([2]))


def check_hparams(optimizer: Any, spec: Any, expected: dict, new: dict) -> None:
    """get_hparams gives `expected`; set_hparams(new) changes exactly those keys; set(get) is a
    no-op."""
    import collections  # pylint: disable=import-outside-toplevel

    state = optimizer.initialize(spec)
    hparams = optimizer.get_hparams(state)
    assert isinstance(hparams, collections.OrderedDict)
    assert hparams == collections.OrderedDict(expected)
    updated = optimizer.set_hparams(state, collections.OrderedDict(new))
    assert isinstance(updated, collections.OrderedDict)
    assert list(updated) == list(state)
    for k in state:
        assert_all_close(updated[k], new[k] if k in new else state[k], 0, 0)
    assert_all_close(optimizer.set_hparams(state, hparams), state, 0, 0)


def check_different_weight_dtypes(build: Callable) -> None:
    weights = (
        tf.constant([0.1], tf.float32),
        tf.constant(1.0, tf.float64),
        tf.constant([10.0, 10.0], tf.bfloat16),
    )
    optimizer = build(tf.constant(0.1, tf.float32))
    state = optimizer.initialize(weights)
    optimizer.next(state, weights, tf.nest.map_structure(tf.zeros_like, weights))
