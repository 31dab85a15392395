"""Bad input raises TFF's exception class (issue 11, "Errors"), with our messages.

Executor constructors, explicit `type_spec`s that contradict a computation,
constants met while tracing, attribute access on traced values and structs,
`infer_type` of large ints, the secure sum's range message, and dataset
elements with unsorted dict keys. Tests taking `stack` run on every stack of
`tests/stacks.py`; the others run once.
"""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness import structure as S
from simharness.core import types as T
from simharness.errors import SimharnessError, SimharnessTypeError, SimharnessValueError
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.federating import FederatingExecutor
from simharness.executors.reference_resolving import ReferenceResolvingExecutor
from simharness.executors.strategy.resolving_strategy import FederatedResolvingStrategy
from simharness.executors.thread_delegating import ThreadDelegatingExecutor


def run(coro):
    return asyncio.run(coro)


# ---------------------------------------------------------------- 1. EagerTFExecutor()


def test_eager_executor_outside_eager_mode_is_a_runtime_error():
    with tf.Graph().as_default():
        with pytest.raises(RuntimeError, match='eager mode') as e:
            EagerTFExecutor()
    assert isinstance(e.value, SimharnessError)

    @tf.function(autograph=False)  # autograph re-raises non-builtin classes as StagingError
    def make():
        EagerTFExecutor()
        return tf.constant(0)

    with pytest.raises(RuntimeError, match='eager mode'):
        make()


def test_eager_executor_device_checks():
    with pytest.raises(TypeError, match=r'device must be .* got 5 of type int') as e:
        EagerTFExecutor(device=5)
    assert isinstance(e.value, SimharnessTypeError)
    with pytest.raises(ValueError, match=r"device '/GPU:17' is not on this machine") as e:
        EagerTFExecutor(device='/GPU:17')
    assert isinstance(e.value, SimharnessValueError)
    with pytest.raises(ValueError, match="'banana' is not a TF device name"):
        EagerTFExecutor(device='banana')
    with pytest.raises(TypeError, match='max_batch_size'):
        EagerTFExecutor(max_batch_size='2')
    # TF's names of this machine's CPU, and TFF's LogicalDevice, are accepted
    for device in ('/CPU:0', '/cpu:0', '/device:CPU:0', tf.config.list_logical_devices('CPU')[0]):
        with EagerTFExecutor(device=device) as ex:
            assert run(run_value(ex, 3)) == 3


async def run_value(ex, v):
    return (await (await ex.create_value(v, tf.int32)).compute()).numpy()


# ---------------------------------------------------------------- 2. executor constructors


def test_executor_constructors_check_their_arguments():
    with pytest.raises(
        TypeError,
        match=r'ReferenceResolvingExecutor target must be an '
        r'Executor.*got 5 of type int',
    ):
        ReferenceResolvingExecutor(5)
    with pytest.raises(
        TypeError,
        match=r'ThreadDelegatingExecutor target must be an '
        r'Executor.*got 5 of type int',
    ):
        ThreadDelegatingExecutor(5)
    with pytest.raises(
        TypeError,
        match=r'strategy_factory must be a strategy factory.*'
        r'got 5 of type int',
    ):
        FederatingExecutor(5, 5)
    with pytest.raises(TypeError, match=r'unplaced_executor must be an Executor.*got 5'):
        FederatingExecutor(lambda ex: None, 5)
    with EagerTFExecutor() as leaf:
        with pytest.raises(TypeError, match=r'must return a FederatingStrategy.*returned 3'):
            FederatingExecutor(lambda ex: 3, leaf)


# ---------------------------------------------------------------- 3. type_spec against a block


@sh.tf_computation(tf.int32)
def inc(x):
    return x + 1


WRONG = T.FunctionType(T.TensorType(np.float32), T.TensorType(np.float32))


def _raw_stacks():
    yield 'eager', EagerTFExecutor()
    from simharness.executors.reference_resolving import ReferenceResolvingExecutor

    yield 'reference-resolving', ReferenceResolvingExecutor(EagerTFExecutor())
    yield (
        'federating',
        FederatingExecutor(
            FederatedResolvingStrategy.factory(
                {sh.SERVER: EagerTFExecutor(), sh.CLIENTS: [EagerTFExecutor()]}
            ),
            EagerTFExecutor(),
        ),
    )


@pytest.mark.parametrize('comp', ['computation', 'building block'])
def test_create_value_refuses_a_contradicting_type_spec(comp):
    value = inc if comp == 'computation' else inc.to_building_block()
    for name, ex in _raw_stacks():
        with ex:
            with pytest.raises(
                TypeError,
                match=r'\(int32 -> int32\) is not assignable to the '
                r'type_spec \(float32 -> float32\)',
            ):
                run(ex.create_value(value, WRONG))
            # the right type (or none) is accepted
            fn = run(ex.create_value(value, inc.type_signature))
            assert str(fn.type_signature) == '(int32 -> int32)', name


def test_federating_executor_refuses_a_contradicting_intrinsic_type():
    ex = FederatingExecutor(
        FederatedResolvingStrategy.factory(
            {sh.SERVER: EagerTFExecutor(), sh.CLIENTS: [EagerTFExecutor()]}
        ),
        EagerTFExecutor(),
    )
    with ex:
        with pytest.raises(TypeError, match='placement .* is not assignable'):
            run(ex.create_value(sh.CLIENTS, T.TensorType(np.int32)))
        v = run(ex.create_value(1, tf.int32))
        with pytest.raises(TypeError, match='value of type int32 is not assignable'):
            run(ex.create_value(v, tf.float32))


# ---------------------------------------------------------------- 4. constants while tracing


@pytest.mark.parametrize(
    'const, reason',
    [
        (2**40, r'outside the range \[-2147483648, 2147483647\] of int32'),
        ('a', 'a string is not a number'),
        (1.5, 'would be truncated'),
        (2**70, 'an int outside int64'),
        (np.array([1, 2]), r'its shape \[2\] is not \[\]'),
    ],
)
def test_constants_that_do_not_fit_the_parameter_are_type_errors(const, reason):
    with pytest.raises(TypeError, match=reason) as e:

        @sh.federated_computation
        def bad():
            return inc(const)

    assert isinstance(e.value, SimharnessTypeError)
    assert 'does not fit the expected type int32' in str(e.value)


def test_constants_that_fit_are_converted(stack):
    @sh.tf_computation(tf.float32, tf.int64, tf.uint8)
    def mix(a, b, c):
        return a + tf.cast(b, tf.float32) + tf.cast(c, tf.float32)

    @sh.federated_computation
    def ok():
        return mix(1, 2**40, 255)  # an int for a float, a big int for int64

    assert ok() == np.float32(1 + 2**40 + 255)
    with pytest.raises(TypeError, match=r'-1 .* outside the range \[0, 255\] of uint8'):

        @sh.federated_computation
        def negative():
            return mix(1.0, 2, -1)

    @sh.federated_computation
    def big():
        return sh.federated_value(2**40, sh.SERVER)  # no parameter type: int64, as TF

    assert str(big.type_signature.result) == 'int64@SERVER'
    assert big() == 2**40


# ---------------------------------------------------------------- 5. attributes and names


def test_traced_non_struct_value_has_no_attribute():
    seen = {}

    @sh.federated_computation(sh.type_at_server(tf.int32))
    def f(x):
        seen['hasattr'] = hasattr(x, 'foo')
        with pytest.raises(
            AttributeError, match="non-struct type int32@SERVER has no attribute 'foo'"
        ):
            x.foo
        return x

    assert seen['hasattr'] is False

    @sh.federated_computation(sh.type_at_server(collections.OrderedDict(a=tf.int32)))
    def g(x):
        seen['a'] = hasattr(x, 'a')
        seen['b'] = hasattr(x, 'b')
        with pytest.raises(AttributeError, match=r"has no element 'b'; its names are \['a'\]"):
            x['b']
        with pytest.raises(TypeError):  # an index into a non-struct: TFF's TypeError
            x.a[0]
        return x.a

    assert (seen['a'], seen['b']) == (True, False)


def test_struct_and_struct_type_names():
    s = S.Struct([('a', 1), ('b', 2)])
    st = T.StructType([('a', tf.int32), ('b', tf.float32)])
    for obj in (s, st):
        with pytest.raises(AttributeError, match="no element named 'nope'") as e:
            obj['nope']
        assert isinstance(e.value, SimharnessError)
        with pytest.raises(AttributeError, match="no element named 'nope'"):
            obj.nope
        assert not hasattr(obj, 'nope') and hasattr(obj, 'a')
    assert (s['b'], st['b']) == (2, T.TensorType(np.float32))
    with pytest.raises(ValueError, match=r"unique.*repeated: \['a'\]") as e:
        S.Struct([('a', 1), ('a', 2)])
    assert isinstance(e.value, SimharnessValueError)
    with pytest.raises(ValueError, match="duplicate element name 'a'"):
        T.StructType([('a', tf.int32), ('a', tf.int32)])
    assert len(S.Struct([(None, 1), (None, 2)])) == 2  # unnamed elements may repeat


# ---------------------------------------------------------------- 6. infer_type of ints


@pytest.mark.parametrize('value', [0, -(2**31), 2**31 - 1, 2**31, 2**40, -(2**63), 2**63 - 1])
def test_infer_type_of_python_ints_is_tf_constants_dtype(value):
    assert T.infer_type(value).dtype == tf.constant(value).dtype.as_numpy_dtype


def test_infer_type_of_an_int_beyond_int64_is_a_value_error():
    with pytest.raises(ValueError, match='does not fit int64'):
        T.infer_type(2**63)


# ---------------------------------------------------------------- 7. secure sum message


def test_secure_sum_range_error_names_max_input(stack):
    @sh.federated_computation(sh.type_at_clients(tf.int32))
    def secure_sum_5(xs):
        return sh.federated_secure_sum(xs, 5)

    with pytest.raises(ValueError, match=r'= 6 is outside \[0, 5\] \(max_input 5\)') as e:
        secure_sum_5([1, 6])
    assert 'bitwidth' not in str(e.value)

    @sh.federated_computation(sh.type_at_clients(tf.int32))
    def bitwidth_3(xs):
        return sh.federated_secure_sum_bitwidth(xs, 3)

    with pytest.raises(ValueError, match=r'= 8 is outside \[0, 7\] \(bitwidth 3\)'):
        bitwidth_3([8])


# ---------------------------------------------------------------- 8. dict elements in type order

YX = collections.OrderedDict(y=tf.float32, x=tf.int32)


@sh.tf_computation(YX)
def yx_sum(e):
    return e['y'] + tf.cast(e['x'], tf.float32)


@sh.tf_computation(tf.float32, YX)
def yx_acc(acc, e):
    return acc + e['y'] * tf.cast(e['x'], tf.float32)


@sh.federated_computation(sh.SequenceType(YX))
def over_yx(ds):
    return sh.sequence_map(yx_sum, ds), sh.sequence_reduce(ds, 0.0, yx_acc), sh.sequence_sum(ds)


def test_sequence_ops_on_elements_with_unsorted_dict_keys(stack):
    ds = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(y=np.array([0.5, 1.5], np.float32), x=np.array([1, 2], np.int32))
    )
    mapped, reduced, summed = over_yx(ds)
    assert list(np.asarray(list(mapped), np.float32)) == [1.5, 3.5]
    assert reduced == np.float32(3.5)
    assert summed['y'] == np.float32(2.0) and summed['x'] == 3
