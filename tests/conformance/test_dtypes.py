"""Every TF dtype in and out of every stack: unplaced results, server and client values.

A string result used to abort the interpreter (a TF check inside
`np.from_dlpack`); results must equal what TFF gives: `bytes` for a string
scalar, an object array of `bytes` for a string tensor, numpy scalars of the
dtype (ml_dtypes' `bfloat16` for bfloat16) and arrays otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh

DTYPES = [
    tf.string,
    tf.bool,
    tf.int8,
    tf.int16,
    tf.int32,
    tf.int64,
    tf.uint8,
    tf.uint16,
    tf.uint32,
    tf.uint64,
    tf.float16,
    tf.bfloat16,
    tf.float32,
    tf.float64,
    tf.complex64,
    tf.complex128,
]
SHAPES = [[], [2, 3]]


def sample(dtype: tf.DType, shape, offset: int = 0):
    """A value of `dtype` and `shape` as a user passes it (bytes for strings)."""
    n = int(np.prod(shape)) if shape else 1
    if dtype == tf.string:
        flat = np.array([b'Hello, World! %d' % (i + offset) for i in range(n)], dtype=object)
    elif dtype == tf.bool:
        flat = np.array([(i + offset) % 2 == 0 for i in range(n)])
    elif dtype.is_complex:
        flat = (np.arange(n) + offset + 1j * (np.arange(n) + 2)).astype(dtype.as_numpy_dtype)
    else:
        flat = (np.arange(n) + offset + 1).astype(dtype.as_numpy_dtype)
    return flat.reshape(shape) if shape else flat[0]


def expected(dtype: tf.DType, shape, offset: int = 0):
    """What TFF returns for `sample(...)`: the tensor's `.numpy()`."""
    return tf.constant(sample(dtype, shape, offset), dtype=dtype).numpy()


def assert_same(result, want):
    assert type(result) is type(want), (type(result), type(want))
    if isinstance(want, np.ndarray):
        assert result.dtype == want.dtype and result.shape == want.shape
        assert result.tolist() == want.tolist()
    else:
        if hasattr(want, 'dtype'):
            assert result.dtype == want.dtype
        assert result == want


CASES = [
    pytest.param(d, s, id=f'{d.name}-{"x".join(map(str, s)) or "scalar"}')
    for d in DTYPES
    for s in SHAPES
]


def _computations(dtype, shape):
    value = sample(dtype, shape)

    @sh.tf_computation
    def constant():
        return tf.constant(value, dtype=dtype)

    @sh.tf_computation(sh.TensorType(dtype, shape))
    def identity(x):
        return tf.identity(x)

    @sh.federated_computation(sh.type_at_server(sh.TensorType(dtype, shape)))
    def at_server(x):
        return sh.federated_map(identity, x)

    @sh.federated_computation(sh.type_at_server(sh.TensorType(dtype, shape)))
    def broadcast(x):
        return sh.federated_map(identity, sh.federated_broadcast(x))

    @sh.federated_computation(sh.type_at_clients(sh.TensorType(dtype, shape)))
    def at_clients(xs):
        return sh.federated_map(identity, xs)

    return constant, identity, at_server, broadcast, at_clients


def test_hello_world(stack):
    @sh.tf_computation
    def hello_world():
        return tf.constant('Hello, World!')

    assert hello_world() == b'Hello, World!'
    assert type(hello_world()) is bytes


@pytest.mark.parametrize('dtype,shape', CASES)
def test_dtype_round_trips(stack, dtype, shape):
    constant, identity, at_server, broadcast, at_clients = _computations(dtype, shape)
    want = expected(dtype, shape)
    assert_same(constant(), want)  # unplaced result
    assert_same(identity(sample(dtype, shape)), want)  # unplaced argument and result
    assert_same(at_server(sample(dtype, shape)), want)  # server value in and out
    out = broadcast(sample(dtype, shape))  # server -> clients -> back
    assert isinstance(out, list)
    for r in out:
        assert_same(r, want)
    with stack.clients(3):
        xs = [sample(dtype, shape, offset=i) for i in range(3)]
        out = at_clients(xs)  # client values in and out
    assert isinstance(out, list) and len(out) == 3
    for i, r in enumerate(out):
        assert_same(r, expected(dtype, shape, offset=i))


def test_strings_given_as_str(stack):
    @sh.tf_computation(tf.string)
    def shout(s):
        return tf.strings.upper(s)

    @sh.federated_computation(sh.type_at_clients(tf.string))
    def shout_all(xs):
        return sh.federated_map(shout, xs)

    assert shout('hi') == b'HI'
    with stack.clients(2):
        assert shout_all(['a', 'b']) == [b'A', b'B']


def test_bfloat16_from_floats(stack):
    @sh.tf_computation(tf.bfloat16)
    def double(x):
        return x * tf.constant(2, tf.bfloat16)

    r = double(1.5)
    assert r.dtype == tf.bfloat16.as_numpy_dtype and float(r) == 3.0


def test_large_tensors_of_every_dtype(stack):
    # Large enough to take the dlpack paths (DLPACK_MIN_BYTES) where the dtype allows them.
    shape = [300, 300]
    for dtype in (tf.string, tf.bool, tf.uint8, tf.float16, tf.bfloat16, tf.complex128):

        @sh.tf_computation(sh.TensorType(dtype, shape))
        def identity(x):
            return tf.identity(x)

        @sh.federated_computation(sh.type_at_clients(sh.TensorType(dtype, shape)))
        def at_clients(xs):
            return sh.federated_map(identity, xs)

        value = sample(dtype, shape)
        want = expected(dtype, shape)
        assert_same(identity(value), want)
        with stack.clients(2):
            for r in at_clients([value, value]):
                assert_same(r, want)


def test_string_sequences(stack):
    @sh.tf_computation(sh.SequenceType(tf.string))
    def join(ds):
        return ds.reduce(tf.constant(''), lambda a, s: tf.strings.join([a, s]))

    @sh.federated_computation(sh.type_at_clients(sh.SequenceType(tf.string)))
    def join_all(xs):
        return sh.federated_map(join, xs)

    with stack.clients(2):
        assert join_all([[b'a', b'b'], tf.data.Dataset.from_tensor_slices(['c', 'd'])]) == [
            b'ab',
            b'cd',
        ]
