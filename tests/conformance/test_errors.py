"""User mistakes and run-time failures: the documented error type, with a message naming the facts.

Trace-time errors do not depend on the stack and are checked once; errors
raised while running are checked on every stack.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.errors import CardinalityError, SimharnessTypeError, SimharnessValueError

F32_AT_C = sh.type_at_clients(tf.float32)
I32_AT_C = sh.type_at_clients(tf.int32)


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.int32)
def int_plus_one(x):
    return x + 1


@sh.tf_computation(tf.float32)
def must_be_positive(x):
    with tf.control_dependencies([tf.debugging.assert_positive(x, message='must be positive')]):
        return tf.identity(x)


@sh.federated_computation(F32_AT_C)
def fed_sum(xs):
    return sh.federated_sum(xs)


@sh.federated_computation(I32_AT_C)
def fed_int_sum(xs):
    return sh.federated_sum(xs)


@sh.federated_computation(F32_AT_C, F32_AT_C)
def fed_two_client_args(a, b):
    return [sh.federated_sum(a), sh.federated_sum(b)]


@sh.federated_computation(F32_AT_C)
def fed_checked_map(xs):
    return sh.federated_map(must_be_positive, xs)


# ---------------------------------------------------------------- arguments


def test_list_shorter_than_the_fixed_number_of_clients(stack):
    with stack.clients(3):
        with pytest.raises(CardinalityError, match=r'\b2\b.*\b3\b') as e:
            fed_sum([1.0, 2.0])
        assert (e.value.expected, e.value.actual) == (3, 2)
        assert fed_sum([1.0, 2.0, 3.0]) == 6.0  # the stack still works


def test_client_arguments_of_different_lengths(stack):
    with pytest.raises(CardinalityError, match=r'\b3\b.*\b2\b') as e:
        fed_two_client_args([1.0, 2.0], [1.0, 2.0, 3.0])
    assert {e.value.expected, e.value.actual} == {2, 3}
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize('value, type_name', [(1.0, 'float'), (np.arange(3.0), 'ndarray')])
def test_client_argument_that_is_not_a_list(stack, value, type_name):
    with pytest.raises(TypeError, match=rf'\{{float32\}}@CLIENTS.*{type_name}'):
        fed_sum(value)


def test_client_values_of_the_wrong_dtype(stack):
    with pytest.raises(TypeError, match='float64.*int32'):
        fed_int_sum([1.5, 2.0, 3.0])
    with pytest.raises(TypeError, match='int32'):
        fed_int_sum(['a', 'b'])
    with pytest.raises(ValueError, match=r'1099511627776.*int32'):
        fed_int_sum([1, 2**40])  # would silently wrap to 0 if cast


# ---------------------------------------------------------------- trace time


def test_map_of_a_computation_of_another_type():
    with pytest.raises(TypeError, match='int32.*float32') as e:

        @sh.federated_computation(F32_AT_C)
        def bad(xs):
            return sh.federated_map(int_plus_one, xs)

    assert isinstance(e.value, SimharnessTypeError)
    assert str(e.value.expected) == 'int32' and str(e.value.actual) == 'float32'


def test_tf_computation_called_on_a_federated_value():
    with pytest.raises(TypeError, match=r'\{float32\}@CLIENTS.*float32'):

        @sh.federated_computation(F32_AT_C)
        def bad(xs):
            return add_one(xs)


def test_federated_sum_of_a_server_value():
    with pytest.raises(TypeError, match=r'federated_sum.*CLIENTS.*float32@SERVER'):

        @sh.federated_computation(sh.type_at_server(tf.float32))
        def bad(x):
            return sh.federated_sum(x)


def test_federated_mean_of_ints():
    with pytest.raises(TypeError, match='federated_mean.*floating.*int32'):

        @sh.federated_computation(I32_AT_C)
        def bad(xs):
            return sh.federated_mean(xs)


@pytest.mark.parametrize(
    'secure',
    [
        lambda xs: sh.federated_secure_sum_bitwidth(xs, 8),
        lambda xs: sh.federated_secure_modular_sum(xs, 8),
    ],
    ids=['bitwidth', 'modular'],
)
def test_secure_sums_of_floats(secure):
    with pytest.raises(TypeError, match='integers only.*float32'):

        @sh.federated_computation(F32_AT_C)
        def bad(xs):
            return secure(xs)


def test_secure_sum_bitwidth_out_of_range():
    with pytest.raises(ValueError, match='bitwidth must be in'):

        @sh.federated_computation(I32_AT_C)
        def bad(xs):
            return sh.federated_secure_sum_bitwidth(xs, 0)


def test_plain_python_function_passed_to_federated_map():
    with pytest.raises(TypeError, match='plain Python function.*tf_computation'):

        @sh.federated_computation(F32_AT_C)
        def bad(xs):
            return sh.federated_map(lambda x: x + 1.0, xs)


def test_intrinsic_outside_a_federated_computation():
    with pytest.raises(TypeError, match='inside a federated_computation'):
        sh.federated_sum([1.0])


# ---------------------------------------------------------------- run time


def test_tf_error_at_run_time_surfaces_with_its_traceback(stack):
    with pytest.raises(tf.errors.InvalidArgumentError, match='must be positive') as e:
        fed_checked_map([1.0, -1.0, 2.0, 3.0])
    if stack.name.startswith(('loopback', 'process', 'remote', 'ray')):
        # Raised behind the seam (a worker, or the loopback's service): its traceback travels
        # as text, chained as the cause.
        remote = e.value.__cause__.remote_traceback
        assert os.path.join('simharness', 'executors', 'leaf', 'eager_tf.py') in remote
        assert os.sep + 'tensorflow' + os.sep in remote
    else:
        files = [os.path.normpath(str(entry.path)) for entry in e.traceback]
        assert any(
            f.endswith(os.path.join('simharness', 'executors', 'leaf', 'eager_tf.py'))
            for f in files
        )
        assert any(os.sep + 'tensorflow' + os.sep in f for f in files)
    assert fed_checked_map([1.0, 2.0, 3.0, 4.0]) == [1.0, 2.0, 3.0, 4.0]  # the stack still works


def test_mean_over_zero_clients(stack):
    @sh.federated_computation(F32_AT_C)
    def mean(xs):
        return sh.federated_mean(xs)

    with pytest.raises(SimharnessValueError, match='zero clients'):
        mean([])
