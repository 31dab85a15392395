"""Port of TFF's ``tensorflow_federated/python/tests/sync_local_cpp_execution_context_test.py``.
No case left out.

TFF decorates each case with ``federated_language.framework.with_context(
tff.backends.native.create_sync_local_cpp_execution_context)``, a new context (here: a
new pool of worker processes) per case, never closed. Here one such context serves the
module (`local_cpp`, closed at its end) and each case installs it;
`test_with_context_installs_a_fresh_context_per_call` checks `with_context` itself on
that factory, closing what it made.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as federated_language
import simharness as tff


@pytest.fixture(scope='module')
def local_cpp():
    ctx = tff.backends.native.create_sync_local_cpp_execution_context()
    yield ctx
    ctx.close()


@pytest.fixture
def installed(local_cpp):
    with federated_language.framework.get_context_stack().install(local_cpp):
        yield local_cpp


def test_simple_no_arg_tf_computation_with_int_result(installed):
    @tff.tensorflow.computation
    def comp():
        return tf.constant(10)

    assert comp() == 10


def test_one_arg_tf_computation_with_int_param_and_result(installed):
    @tff.tensorflow.computation(np.int32)
    def comp(x):
        return tf.add(x, 10)

    assert comp(3) == 13


def test_three_arg_tf_computation_with_int_params_and_result(installed):
    @tff.tensorflow.computation(np.int32, np.int32, np.int32)
    def comp(x, y, z):
        return tf.multiply(tf.add(x, y), z)

    assert comp(3, 4, 5) == 35


def test_tf_computation_with_dataset_params_and_int_result(installed):
    @tff.tensorflow.computation(federated_language.SequenceType(np.int32))
    def comp(ds):
        return ds.reduce(np.int32(0), lambda total, x: total + x)

    assert comp(tf.data.Dataset.range(10).map(lambda x: tf.cast(x, np.int32))) == 45


def test_tf_computation_with_structured_result(installed):
    @tff.tensorflow.computation
    def comp():
        return collections.OrderedDict([('a', tf.constant(10)), ('b', tf.constant(20))])

    result = comp()
    assert isinstance(result, collections.OrderedDict)
    assert result == {'a': 10, 'b': 20}


def test_changing_cardinalities_across_calls(installed):
    @federated_language.federated_computation(
        federated_language.FederatedType(np.int32, federated_language.CLIENTS)
    )
    def comp(x):
        return x

    assert comp(list(range(5))) == list(range(5))
    assert comp(list(range(10))) == list(range(10))


def test_conflicting_cardinalities_within_call(installed):
    at_clients = federated_language.FederatedType(np.int32, federated_language.CLIENTS)

    @federated_language.federated_computation([at_clients, at_clients])
    def comp(x):
        return x

    with pytest.raises(ValueError, match='Conflicting cardinalities'):
        comp([list(range(5)), list(range(10))])


def test_tuple_argument_can_accept_unnamed_elements(installed):
    @tff.tensorflow.computation(np.int32, np.int32)
    def foo(x, y):
        return x + y

    assert foo([2, 3]) == 5  # pylint: disable=no-value-for-parameter


def test_with_context_installs_a_fresh_context_per_call():
    made = []

    def make():
        made.append(tff.backends.native.create_sync_local_cpp_execution_context())
        return made[-1]

    @tff.tensorflow.computation(np.int32)
    def plus_ten(x):
        return x + 10

    @federated_language.framework.with_context(make)
    def run(x):
        assert federated_language.framework.get_context_stack().current is made[-1]
        return plus_ten(x)

    try:
        assert run(1) == 11 and run(2) == 12
        assert len(made) == 2 and made[0] is not made[1]
        assert federated_language.framework.get_context_stack().current not in made
    finally:
        for ctx in made:
            ctx.close()
