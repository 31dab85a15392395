"""Port of federated-language's ``federated_language/federated_context/intrinsics_test.py``.

TFF builds fake values and functions (references, lambdas over free references)
and checks the type each intrinsic returns inside a `FederatedComputationContext`.
Here the fake values are the parameters of a traced `federated_computation`
and the fake functions are `tf_computation`s of the same types, which check
the same thing: the result type of every intrinsic, and the TypeError /
ValueError / context error TFF raises. Executing tests (min/max/select/
map_all_equal) run on the `tff_stack` fixture.

Cases left out, and why:
- ``FederatedSecureSum*Test`` with `max_input` / `bitwidth` given as a traced
  value: simharness takes them as Python ints (static, checked while
  tracing), so the cases that pass a traced int use the int itself.
- ``FederatedZipTest.test_raises_value_error`` ``int_clients`` / ``int_server``:
  simharness's `federated_zip` of one federated value returns it (older TFF
  code zips single values); the unplaced case raises ValueError as in TFF.
- ``FederatedSelectTest`` ``max_key_int_unplaced`` is kept for a traced value;
  a Python int max_key is placed at the server for you (documented).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import simharness as federated_language
from simharness.core import intrinsics  # federated_map_all_equal: not public in TFF
from simharness.errors import ContextError

_INT = federated_language.TensorType(np.int32)
_INT_CLIENTS = federated_language.FederatedType(_INT, federated_language.CLIENTS)
_INT_SERVER = federated_language.FederatedType(_INT, federated_language.SERVER)
_FLOAT = federated_language.TensorType(np.float32)
_FLOAT_CLIENTS = federated_language.FederatedType(_FLOAT, federated_language.CLIENTS)
_FLOAT_SERVER = federated_language.FederatedType(_FLOAT, federated_language.SERVER)
_STR = federated_language.TensorType(np.str_)
_STR_CLIENTS = federated_language.FederatedType(_STR, federated_language.CLIENTS)
_ARRAY_INT = federated_language.TensorType(np.int32, shape=[3])
_ARRAY_INT_CLIENTS = federated_language.FederatedType(_ARRAY_INT, federated_language.CLIENTS)
_ARRAY_INT_SERVER = federated_language.FederatedType(_ARRAY_INT, federated_language.SERVER)
_SEQUENCE_INT = federated_language.SequenceType(np.int32)
_SEQUENCE_INT_CLIENTS = federated_language.FederatedType(_SEQUENCE_INT, federated_language.CLIENTS)
_SEQUENCE_INT_SERVER = federated_language.FederatedType(_SEQUENCE_INT, federated_language.SERVER)
_SEQUENCE_FLOAT = federated_language.SequenceType(np.float32)
_SEQUENCE_FLOAT_CLIENTS = federated_language.FederatedType(
    _SEQUENCE_FLOAT, federated_language.CLIENTS
)
_SEQUENCE_FLOAT_SERVER = federated_language.FederatedType(
    _SEQUENCE_FLOAT, federated_language.SERVER
)
_STRUCT_INT = federated_language.StructWithPythonType([np.int32, np.int32, np.int32], list)
_STRUCT_INT_CLIENTS = federated_language.FederatedType(_STRUCT_INT, federated_language.CLIENTS)
_STRUCT_INT_SERVER = federated_language.FederatedType(_STRUCT_INT, federated_language.SERVER)
_STRUCT_FLOAT = federated_language.StructWithPythonType([np.float32] * 3, list)
_STRUCT_FLOAT_CLIENTS = federated_language.FederatedType(_STRUCT_FLOAT, federated_language.CLIENTS)


def _const(t):
    """A TF value of type `t` (zeros, an empty string, a one-element dataset)."""
    if isinstance(t, federated_language.SequenceType):
        return tf.data.Dataset.from_tensors(_const(t.element))
    if isinstance(t, federated_language.StructType):
        return [_const(e) for e in t]
    if t.dtype == np.dtype(object):
        return tf.constant('')
    return tf.zeros(t.shape, t.dtype)


def _fake_fn(parameter_type, result_type):
    """A tf_computation of `(parameter_type -> result_type)` (TFF's `_create_fake_fn`)."""
    if parameter_type is None:
        return federated_language.tensorflow.computation(lambda: _const(result_type))
    param = federated_language.to_type(parameter_type)
    return federated_language.tensorflow.computation(lambda *_: _const(result_type), param)


def _traced_type(fn, *types):
    """The type of `fn(*values)`, the values being parameters of these types."""
    comp = federated_language.federated_computation(*types)(fn)
    return comp.type_signature.result


def _raises(error, fn, *types):
    with pytest.raises(error):
        _traced_type(fn, *types)


# ---------------------------------------------------------------- broadcast


@pytest.mark.parametrize('t', [_INT_SERVER, _SEQUENCE_INT_SERVER, _STRUCT_INT_SERVER])
def test_federated_broadcast_returns_result(t):
    result = _traced_type(federated_language.federated_broadcast, t)
    assert result == federated_language.FederatedType(
        t.member, federated_language.CLIENTS, all_equal=True
    )


@pytest.mark.parametrize('t', [_INT, _INT_CLIENTS])
def test_federated_broadcast_raises_type_error(t):
    _raises(TypeError, federated_language.federated_broadcast, t)


def test_intrinsics_raise_context_error_with_no_federated_context():
    value = federated_language.federated_computation(lambda: 1)
    with pytest.raises(ContextError):
        federated_language.federated_broadcast(value)
    with pytest.raises(RuntimeError):  # TFF's ContextError is a RuntimeError
        federated_language.federated_eval(_fake_fn(None, _INT), federated_language.CLIENTS)


# ---------------------------------------------------------------- eval


@pytest.mark.parametrize(
    'result_type, placement',
    [
        (_INT, federated_language.CLIENTS),
        (_INT, federated_language.SERVER),
        (_SEQUENCE_INT, federated_language.CLIENTS),
        (_STRUCT_INT, federated_language.CLIENTS),
    ],
)
def test_federated_eval_returns_result(result_type, placement):
    fn = _fake_fn(None, result_type)
    result = _traced_type(lambda: federated_language.federated_eval(fn, placement))
    assert result == federated_language.FederatedType(fn.type_signature.result, placement)


# ---------------------------------------------------------------- map


@pytest.mark.parametrize(
    'fn_param, arg_types, expected',
    [
        (_INT, [_INT_CLIENTS], _FLOAT_CLIENTS),
        (_INT, [_INT_SERVER], _FLOAT_SERVER),
        (_SEQUENCE_INT, [_SEQUENCE_INT_CLIENTS], _FLOAT_CLIENTS),
        (_STRUCT_INT, [_STRUCT_INT_CLIENTS], _FLOAT_CLIENTS),
    ],
)
def test_federated_map_returns_result(fn_param, arg_types, expected):
    fn = _fake_fn(fn_param, _FLOAT)
    assert _traced_type(lambda x: federated_language.federated_map(fn, x), *arg_types) == expected


def test_federated_map_struct_injected_zip():
    fn = _fake_fn(_STRUCT_INT, _FLOAT)
    result = _traced_type(
        lambda a, b, c: federated_language.federated_map(fn, [a, b, c]),
        _INT_CLIENTS,
        _INT_CLIENTS,
        _INT_CLIENTS,
    )
    assert result == _FLOAT_CLIENTS


def test_federated_map_raises_type_error():
    fn = _fake_fn(_INT, _FLOAT)
    _raises(TypeError, lambda x: federated_language.federated_map(fn, x), _INT)
    pair = _fake_fn(_STRUCT_INT, _FLOAT)
    _raises(
        TypeError,
        lambda a, b: federated_language.federated_map(pair, [a, b]),
        _INT_CLIENTS,
        _FLOAT_SERVER,
    )


def test_federated_map_all_equal_returns_result():
    fn = _fake_fn(_INT, _FLOAT)
    result = _traced_type(
        lambda x: intrinsics.federated_map_all_equal(fn, x),
        federated_language.FederatedType(_INT, federated_language.CLIENTS, all_equal=True),
    )
    assert result == federated_language.FederatedType(
        _FLOAT, federated_language.CLIENTS, all_equal=True
    )
    _raises(TypeError, lambda x: intrinsics.federated_map_all_equal(fn, x), _INT_SERVER)


# ---------------------------------------------------------------- secure sums


@pytest.mark.parametrize(
    'value_type, bound',
    [(_INT_CLIENTS, 7), (_STRUCT_INT_CLIENTS, 7), (_STRUCT_INT_CLIENTS, [1, 2, 3])],
)
@pytest.mark.parametrize('intrinsic', ['federated_secure_sum', 'federated_secure_sum_bitwidth'])
def test_federated_secure_sums_return_result(value_type, bound, intrinsic):
    fn = getattr(federated_language, intrinsic)
    result = _traced_type(lambda x: fn(x, bound), value_type)
    assert result == federated_language.FederatedType(value_type.member, federated_language.SERVER)


@pytest.mark.parametrize(
    'value_type, bound',
    [
        (_INT, 7),
        (_FLOAT_CLIENTS, 7),
        (_INT_SERVER, 7),
        (federated_language.FederatedType([np.int32] * 2, federated_language.CLIENTS), [1, 2, 3]),
    ],
)
@pytest.mark.parametrize('intrinsic', ['federated_secure_sum', 'federated_secure_sum_bitwidth'])
def test_federated_secure_sums_raise_type_error(value_type, bound, intrinsic):
    fn = getattr(federated_language, intrinsic)
    _raises(TypeError, lambda x: fn(x, bound), value_type)


# ---------------------------------------------------------------- select


def test_federated_select_returns_result():
    fn = _fake_fn([_STRUCT_INT, _INT], _FLOAT)
    for intrinsic in (
        federated_language.federated_select,
        federated_language.federated_secure_select,
    ):
        result = _traced_type(
            lambda k, m, s: intrinsic(k, m, s, fn),
            _ARRAY_INT_CLIENTS,
            _INT_SERVER,
            _STRUCT_INT_SERVER,
        )
        assert result == _SEQUENCE_FLOAT_CLIENTS
        zipped = _traced_type(
            lambda k, m, a, b, c: intrinsic(k, m, [a, b, c], fn),
            _ARRAY_INT_CLIENTS,
            _INT_SERVER,
            _INT_SERVER,
            _INT_SERVER,
            _INT_SERVER,
        )
        assert zipped == _SEQUENCE_FLOAT_CLIENTS


@pytest.mark.parametrize(
    'keys, max_key, server_val, fn_types',
    [
        (_ARRAY_INT, _INT_SERVER, _STRUCT_INT_SERVER, [_STRUCT_INT, _INT]),
        (_ARRAY_INT_SERVER, _INT_SERVER, _STRUCT_INT_SERVER, [_STRUCT_INT, _INT]),
        (_ARRAY_INT_CLIENTS, _INT, _STRUCT_INT_SERVER, [_STRUCT_INT, _INT]),
        (_ARRAY_INT_CLIENTS, _INT_CLIENTS, _STRUCT_INT_SERVER, [_STRUCT_INT, _INT]),
        (_ARRAY_INT_CLIENTS, _FLOAT_SERVER, _STRUCT_INT_SERVER, [_STRUCT_INT, _INT]),
        (_ARRAY_INT_CLIENTS, _INT_SERVER, _STRUCT_INT, [_STRUCT_INT, _INT]),
        (_ARRAY_INT_CLIENTS, _INT_SERVER, _STRUCT_INT_CLIENTS, [_STRUCT_INT, _INT]),
        (_ARRAY_INT_CLIENTS, _INT_SERVER, _STRUCT_INT_SERVER, [_STRUCT_INT, _FLOAT]),
    ],
    ids=[
        'client_keys_array_unplaced',
        'client_keys_array_server',
        'max_key_int_unplaced',
        'max_key_int_clients',
        'max_key_float_server',
        'server_value_struct_unplaced',
        'server_value_struct_clients',
        'select_fn_second_parameter_float',
    ],
)
def test_federated_select_raises_type_error(keys, max_key, server_val, fn_types):
    fn = _fake_fn(fn_types, _FLOAT)
    _raises(
        TypeError,
        lambda k, m, s: federated_language.federated_select(k, m, s, fn),
        keys,
        max_key,
        server_val,
    )


# ---------------------------------------------------------------- sum, min, max, mean


@pytest.mark.parametrize('intrinsic', ['federated_sum', 'federated_min', 'federated_max'])
@pytest.mark.parametrize('t', [_INT_CLIENTS, _STRUCT_INT_CLIENTS])
def test_reductions_return_result(intrinsic, t):
    result = _traced_type(getattr(federated_language, intrinsic), t)
    assert result == federated_language.FederatedType(t.member, federated_language.SERVER)


@pytest.mark.parametrize('t', [_INT, _STR_CLIENTS, _INT_SERVER])
def test_federated_sum_raises_type_error(t):
    _raises(TypeError, federated_language.federated_sum, t)


@pytest.mark.parametrize('intrinsic', ['federated_min', 'federated_max'])
def test_federated_min_max_raise_type_and_value_errors(intrinsic):
    fn = getattr(federated_language, intrinsic)
    _raises(TypeError, fn, _INT)
    _raises(TypeError, fn, _INT_SERVER)
    _raises(ValueError, fn, _STR_CLIENTS)


@pytest.mark.parametrize(
    'value_type, weight_type',
    [
        (_FLOAT_CLIENTS, None),
        (_FLOAT_CLIENTS, _FLOAT_CLIENTS),
        (_STRUCT_FLOAT_CLIENTS, None),
        (_STRUCT_FLOAT_CLIENTS, _FLOAT_CLIENTS),
    ],
)
def test_federated_mean_returns_result(value_type, weight_type):
    if weight_type is None:
        result = _traced_type(lambda v: federated_language.federated_mean(v), value_type)
    else:
        result = _traced_type(federated_language.federated_mean, value_type, weight_type)
    assert result == federated_language.FederatedType(value_type.member, federated_language.SERVER)


@pytest.mark.parametrize(
    'value_type, weight_type',
    [
        (_INT_CLIENTS, None),
        (_FLOAT_SERVER, None),
        (_FLOAT_CLIENTS, _STR_CLIENTS),
        (_FLOAT_CLIENTS, _FLOAT_SERVER),
    ],
)
def test_federated_mean_raises_type_error(value_type, weight_type):
    if weight_type is None:
        _raises(TypeError, lambda v: federated_language.federated_mean(v), value_type)
    else:
        _raises(TypeError, federated_language.federated_mean, value_type, weight_type)


# ---------------------------------------------------------------- zip


@pytest.mark.parametrize(
    'types, pack, expected',
    [
        ([_INT_CLIENTS] * 3, lambda a, b, c: [a, b, c], _STRUCT_INT_CLIENTS),
        ([_INT_SERVER] * 3, lambda a, b, c: [a, b, c], _STRUCT_INT_SERVER),
        (
            [_INT_CLIENTS, _FLOAT_CLIENTS, _STR_CLIENTS],
            lambda a, b, c: [a, b, c],
            federated_language.FederatedType(
                [np.int32, np.float32, np.str_], federated_language.CLIENTS
            ),
        ),
        (
            [_INT_CLIENTS] * 3,
            lambda a, b, c: [a, [b, c]],
            federated_language.FederatedType(
                [np.int32, [np.int32, np.int32]], federated_language.CLIENTS
            ),
        ),
        (
            [_INT_CLIENTS] * 3,
            lambda a, b, c: {'a': a, 'b': b, 'c': c},
            federated_language.FederatedType(
                {'a': np.int32, 'b': np.int32, 'c': np.int32}, federated_language.CLIENTS
            ),
        ),
    ],
    ids=[
        'struct_clients',
        'struct_server',
        'struct_different_dtypes',
        'struct_nested',
        'struct_named',
    ],
)
def test_federated_zip_returns_result(types, pack, expected):
    result = _traced_type(lambda *xs: federated_language.federated_zip(pack(*xs)), *types)
    assert result == expected


def test_federated_zip_one_element():
    result = _traced_type(lambda a: federated_language.federated_zip([a]), _INT_CLIENTS)
    assert result == federated_language.FederatedType([np.int32], federated_language.CLIENTS)


def test_federated_zip_raises():
    _raises(ValueError, federated_language.federated_zip, _INT)
    _raises(
        TypeError, lambda a, b: federated_language.federated_zip([a, b]), _INT_CLIENTS, _INT_SERVER
    )


# ---------------------------------------------------------------- aggregate, value


def test_federated_aggregate_returns_result():
    acc = _fake_fn([_FLOAT, _INT], _FLOAT)
    merge = _fake_fn([_FLOAT, _FLOAT], _FLOAT)
    report = _fake_fn(_FLOAT, _STR)
    result = _traced_type(
        lambda v: federated_language.federated_aggregate(v, np.float32(0), acc, merge, report),
        _INT_CLIENTS,
    )
    assert result == federated_language.FederatedType(_STR, federated_language.SERVER)


def test_federated_aggregate_raises_type_error_on_mismatched_zero():
    acc = _fake_fn([_FLOAT, _INT], _FLOAT)
    merge = _fake_fn([_FLOAT, _FLOAT], _FLOAT)
    report = _fake_fn(_FLOAT, _STR)
    _raises(
        TypeError,
        lambda v: federated_language.federated_aggregate(v, np.int32(0), acc, merge, report),
        _INT_CLIENTS,
    )


@pytest.mark.parametrize(
    'value, placement',
    [
        (1, federated_language.CLIENTS),
        (1, federated_language.SERVER),
        ([1, 2, 3], federated_language.CLIENTS),
    ],
)
def test_federated_value_returns_result(value, placement):
    result = _traced_type(lambda: federated_language.federated_value(value, placement))
    assert result == federated_language.FederatedType(
        federated_language.infer_type(value), placement, all_equal=True
    )


# ---------------------------------------------------------------- sequences


@pytest.mark.parametrize(
    'arg_type, expected',
    [
        (_SEQUENCE_INT, _SEQUENCE_FLOAT),
        (_SEQUENCE_INT_CLIENTS, _SEQUENCE_FLOAT_CLIENTS),
        (_SEQUENCE_INT_SERVER, _SEQUENCE_FLOAT_SERVER),
    ],
)
def test_sequence_map_returns_result(arg_type, expected):
    fn = _fake_fn(_INT, _FLOAT)
    assert _traced_type(lambda s: federated_language.sequence_map(fn, s), arg_type) == expected


@pytest.mark.parametrize(
    'value_type, zero_type',
    [
        (_SEQUENCE_INT, _FLOAT),
        (_SEQUENCE_INT_CLIENTS, _FLOAT_CLIENTS),
        (_SEQUENCE_INT_SERVER, _FLOAT_SERVER),
    ],
)
def test_sequence_reduce_returns_result(value_type, zero_type):
    op = _fake_fn([_FLOAT, _INT], _FLOAT)
    result = _traced_type(
        lambda s, z: federated_language.sequence_reduce(s, z, op), value_type, zero_type
    )
    assert (
        result.member == _FLOAT
        if isinstance(result, federated_language.FederatedType)
        else result == _FLOAT
    )
    if isinstance(zero_type, federated_language.FederatedType):
        assert result.placement is zero_type.placement


@pytest.mark.parametrize(
    'arg_type, expected',
    [
        (_SEQUENCE_INT, _INT),
        (_SEQUENCE_INT_CLIENTS, _INT_CLIENTS),
        (_SEQUENCE_INT_SERVER, _INT_SERVER),
    ],
)
def test_sequence_sum_returns_result(arg_type, expected):
    assert _traced_type(federated_language.sequence_sum, arg_type) == expected


# ---------------------------------------------------------------- executed (every stack)


def test_federated_min_max_values(tff_stack):
    @federated_language.federated_computation(_FLOAT_CLIENTS)
    def min_max(x):
        return federated_language.federated_min(x), federated_language.federated_max(x)

    values = [np.float32(v) for v in (3.5, -2.0, 7.25, 0.0, -0.0, 1.5)] * 6  # 36: 3 chunks
    low, high = min_max(values)
    assert (low, high) == (np.float32(-2.0), np.float32(7.25))


def test_federated_min_max_of_structs_and_zero_clients(tff_stack):
    t = federated_language.FederatedType([np.int32, (np.float32, [2])], federated_language.CLIENTS)

    @federated_language.federated_computation(t)
    def min_max(x):
        return federated_language.federated_min(x), federated_language.federated_max(x)

    values = [[np.int32(i - 5), np.array([i, -i], np.float32)] for i in range(20)]
    low, high = min_max(values)
    assert low[0] == -5 and high[0] == 14
    np.testing.assert_array_equal(low[1], [0.0, -19.0])
    np.testing.assert_array_equal(high[1], [19.0, 0.0])
    # No clients: TFF's start values, the dtype's largest (min) and smallest (max) finite values.
    low, high = min_max([])
    assert low[0] == np.iinfo(np.int32).max and high[0] == np.iinfo(np.int32).min
    np.testing.assert_array_equal(low[1], [np.finfo(np.float32).max] * 2)
    np.testing.assert_array_equal(high[1], [np.finfo(np.float32).min] * 2)


def test_federated_min_clamps_infinity_as_tff(tff_stack):
    @federated_language.federated_computation(_FLOAT_CLIENTS)
    def minimum(x):
        return federated_language.federated_min(x)

    assert minimum([np.float32(np.inf)] * 3) == np.finfo(np.float32).max


def test_federated_secure_select_equals_select(tff_stack):
    @federated_language.tensorflow.computation(_ARRAY_INT, np.int32)
    def pick(table, key):
        return tf.gather(table, key) * 10

    @federated_language.tensorflow.computation(_SEQUENCE_INT)
    def total(ds):
        return ds.reduce(np.int32(0), lambda a, b: a + b)

    @federated_language.federated_computation(
        federated_language.FederatedType((np.int32, [2]), federated_language.CLIENTS),
        _ARRAY_INT_SERVER,
    )
    def both(keys, table):
        max_key = federated_language.federated_value(np.int32(3), federated_language.SERVER)
        plain = federated_language.federated_select(keys, max_key, table, pick)
        secure = federated_language.federated_secure_select(keys, max_key, table, pick)
        return (
            federated_language.federated_map(total, plain),
            federated_language.federated_map(total, secure),
        )

    keys = [np.array([0, 1], np.int32), np.array([2, 2], np.int32), np.array([1, 0], np.int32)]
    plain, secure = both(keys, np.array([1, 2, 3], np.int32))
    assert [int(x) for x in plain] == [30, 60, 30]
    assert [int(x) for x in secure] == [30, 60, 30]


def test_federated_map_all_equal_runs_once(tff_stack):
    @federated_language.tensorflow.computation(np.int32)
    def noisy(x):
        return tf.cast(x, tf.float32) + tf.random.uniform([])

    @federated_language.federated_computation(_INT_SERVER)
    def comp(x):
        return intrinsics.federated_map_all_equal(noisy, federated_language.federated_broadcast(x))

    value = comp(np.int32(2))
    assert 2.0 <= float(value) < 3.0  # one draw, equal on all clients (an all-equal result)
