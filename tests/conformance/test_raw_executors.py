"""TFF's raw executor API on our executors, in the style of TFF's executor tests.

Stacks built by hand (EagerTF, ThreadDelegating, ReferenceResolving,
Federating + FederatedResolvingStrategy), driven with create_value /
create_call / create_struct / create_selection / compute: computations and
placement literals are embedded as is, TFF's ``{SERVER: ex, CLIENTS: [...]}``
strategy factory, OrderedDict structs, use after close(), sequences given as
generator functions. The last tests run on every stack of the registry.
"""

from __future__ import annotations

import asyncio
import collections
import threading

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from computations import listed  # tests/computations.py
from simharness.core import types as T
from simharness.executors.leaf.eager_tf import EagerTFExecutor, EagerValue
from simharness.executors.federating import FederatingExecutor
from simharness.executors.reference_resolving import ReferenceResolvingExecutor
from simharness.executors.strategy.resolving_strategy import FederatedResolvingStrategy
from simharness.executors.thread_delegating import ThreadDelegatingExecutor, ThreadDelegatingValue

Point = collections.namedtuple('Point', 'x y')


def run(coro):
    return asyncio.run(coro)


def invoke(ex, comp, arg=None):
    """TFF's `_invoke`: embed the computation as is, then the argument, call, compute."""

    async def go():
        fn = await ex.create_value(comp)
        a = None if arg is None else await ex.create_value(arg, fn.type_signature.parameter)
        return await (await ex.create_call(fn, a)).compute()

    return run(go())


def numpy(x):
    return x.numpy() if hasattr(x, 'numpy') else x


@sh.tf_computation(tf.int32)
def add_one(x):
    return tf.add(x, 1)


@sh.tf_computation(tf.int32, tf.int32)
def add(a, b):
    return a + b


@sh.tf_computation(sh.SequenceType(tf.int32))
def ds_sum(ds):
    return ds.reduce(np.int32(0), lambda p, q: p + q)


@sh.tf_computation(sh.SequenceType(Point(tf.int32, tf.int32)))
def point_sum(ds):
    return ds.reduce(np.int32(0), lambda p, q: p + q.x * q.y)


@sh.tf_computation(sh.SequenceType(Point(tf.int32, tf.int32)))
def point_identity(ds):
    return ds


@sh.federated_computation(sh.type_at_clients(tf.int32))
def sum_plus_one(xs):
    return sh.federated_sum(sh.federated_map(add_one, xs))


def threaded_eager(name='simharness-test-raw'):
    return ThreadDelegatingExecutor(EagerTFExecutor(), name=name)


# ---------------------------------------------------------------- EagerTFExecutor


class TestEagerTF:
    def test_create_value_of_a_computation(self):
        ex = EagerTFExecutor()
        assert numpy(invoke(ex, add_one, 10)) == 11
        assert numpy(invoke(ex, add, [10, 20])) == 30

    def test_create_value_of_a_computation_with_its_type(self):
        ex = EagerTFExecutor()

        async def go():
            fn = await ex.create_value(add, add.type_signature)
            assert str(fn.type_signature) == str(add.type_signature)
            arg = await ex.create_value([10, 20], fn.type_signature.parameter)
            return await (await ex.create_call(fn, arg)).compute()

        assert numpy(run(go())) == 30

    def test_struct_from_ordered_dict_and_selection(self):
        ex = EagerTFExecutor()

        async def go():
            a = await ex.create_value(1, tf.int32)
            b = await ex.create_value(2.0, tf.float32)
            s = await ex.create_struct(collections.OrderedDict([('a', a), ('b', b)]))
            assert s.type_signature == T.StructType([('a', tf.int32), ('b', tf.float32)])
            return await (await ex.create_selection(s, 1)).compute()

        assert numpy(run(go())) == 2.0

    @pytest.mark.parametrize(
        'make',
        [
            lambda: tf.data.Dataset.from_tensor_slices([10, 20, 30]),
            lambda: [10, 20, 30],
            lambda: lambda: iter([10, 20, 30]),
            lambda: lambda: (x for x in [10, 20, 30]),
        ],
        ids=['dataset', 'list', 'function', 'generator_function'],
    )
    def test_sequences(self, make):
        assert numpy(invoke(EagerTFExecutor(), ds_sum, make())) == 60

    def test_generator_function(self):
        def gen():
            for i in range(4):
                yield np.int32(i)

        assert numpy(invoke(EagerTFExecutor(), ds_sum, gen)) == 6

    def test_dataset_of_namedtuples(self):
        ds = tf.data.Dataset.from_tensor_slices(Point([1, 2, 3], [4, 5, 6]))
        assert numpy(invoke(EagerTFExecutor(), point_sum, ds)) == 32

    def test_usable_after_close(self):
        ex = EagerTFExecutor()
        assert numpy(invoke(ex, add_one, 1)) == 2
        ex.close()
        ex.close()
        assert numpy(invoke(ex, add_one, 2)) == 3  # re-initialized, as in TFF


# ---------------------------------------------------------------- ThreadDelegatingExecutor


def _select_a(ex):
    async def compute():
        return await ex.create_selection(
            await ex.create_struct(
                collections.OrderedDict(
                    [
                        (
                            'a',
                            await ex.create_call(
                                await ex.create_value(add_one), await ex.create_value(10, tf.int32)
                            ),
                        )
                    ]
                )
            ),
            0,
        )

    return run(compute())


def _value_to_numpy(value):
    assert isinstance(value, ThreadDelegatingValue)
    assert isinstance(value.internal, EagerValue)
    return value.internal.internal.numpy()


class TestThreadDelegating:
    def test_with_eager_tf_executor(self):
        with threaded_eager() as ex:
            assert _value_to_numpy(_select_a(ex)) == 11

    def test_create_struct_of_an_ordered_dict_passes_values(self):
        with threaded_eager() as ex:

            async def go():
                a = await ex.create_value(1, tf.int32)
                b = await ex.create_value(2, tf.int32)
                s = await ex.create_struct(collections.OrderedDict([('a', a), ('b', b)]))
                assert s.type_signature == T.StructType([('a', tf.int32), ('b', tf.int32)])
                return await s.compute()

            out = run(go())
            assert out.names == ('a', 'b') and [numpy(v) for v in out] == [1, 2]

    def test_close_then_use(self):
        ex = threaded_eager('simharness-test-raw-reuse')
        ex.close()
        assert _value_to_numpy(_select_a(ex)) == 11
        ex.close()
        assert not [t for t in threading.enumerate() if t.name == 'simharness-test-raw-reuse']

    def test_multiple_computations_with_same_executor(self):
        ex = threaded_eager()
        try:
            assert _value_to_numpy(_select_a(ex)) == 11
            ex.close()  # closed: the next use re-initializes it
            assert _value_to_numpy(_select_a(ex)) == 11
        finally:
            ex.close()

    def test_end_to_end(self):
        ex = threaded_eager()
        try:
            assert numpy(invoke(ex, add_one, 7)) == 8
            assert numpy(invoke(ex, add_one, 8)) == 9
        finally:
            ex.close()


# ---------------------------------------------------------------- ReferenceResolving + Federating


def create_test_executor(number_of_clients=3):
    """TFF's federating_executor_test stack, by renaming."""

    def create_bottom_stack():
        return ReferenceResolvingExecutor(EagerTFExecutor())

    factory = FederatedResolvingStrategy.factory(
        {
            sh.SERVER: create_bottom_stack(),
            sh.CLIENTS: [create_bottom_stack() for _ in range(number_of_clients)],
        }
    )
    return FederatingExecutor(factory, create_bottom_stack())


class TestFederating:
    def test_placement_literals(self):
        ex = create_test_executor()
        for literal in (sh.SERVER, sh.CLIENTS):
            v = run(ex.create_value(literal))
            assert isinstance(v.type_signature, T.PlacementType)
            v = run(ex.create_value(literal, T.PlacementType()))
            assert isinstance(v.type_signature, T.PlacementType)
        rr = ReferenceResolvingExecutor(ex)
        assert isinstance(run(rr.create_value(sh.SERVER)).type_signature, T.PlacementType)

    def test_computation_values(self):
        ex = create_test_executor()
        v = run(ex.create_value(add_one))
        assert v.type_signature == add_one.type_signature
        v = run(ex.create_value(add_one, add_one.type_signature))
        assert v.type_signature == add_one.type_signature

    def test_federated_values(self):
        ex = create_test_executor()
        v = run(ex.create_value([1, 2, 3], sh.type_at_clients(tf.int32)))
        assert [numpy(x) for x in run(v.compute())] == [1, 2, 3]
        v = run(ex.create_value(10, sh.type_at_server(tf.int32)))
        assert numpy(run(v.compute())) == 10

    def test_federated_computation_through_reference_resolving(self):
        ex = ReferenceResolvingExecutor(create_test_executor())
        assert numpy(invoke(ex, sum_plus_one, [1, 2, 3])) == 9
        assert numpy(invoke(ex, add_one, 4)) == 5

    def test_factory_forms(self):
        for targets in (
            {sh.SERVER: EagerTFExecutor(), sh.CLIENTS: EagerTFExecutor()},
            {'server': EagerTFExecutor(), 'clients': [(EagerTFExecutor(), 2)]},
            {
                sh.SERVER: threaded_eager(),
                sh.CLIENTS: [ReferenceResolvingExecutor(threaded_eager())] * 2,
            },
        ):
            fed = FederatingExecutor(FederatedResolvingStrategy.factory(targets), EagerTFExecutor())
            try:
                n = fed.strategy.num_clients
                out = invoke(ReferenceResolvingExecutor(fed), sum_plus_one, list(range(n)))
                assert numpy(out) == sum(range(n)) + n
            finally:
                fed.close()
        fed = FederatingExecutor(
            FederatedResolvingStrategy.factory({sh.SERVER: EagerTFExecutor()}), EagerTFExecutor()
        )
        assert fed.strategy.num_clients == 0
        # No CLIENTS entry: what is placed at CLIENTS is refused (TFF 0.19's ValueError) ...
        with pytest.raises(ValueError, match='no CLIENTS executor'):
            run(fed.create_value([], sh.type_at_clients(tf.int32)))
        with pytest.raises(ValueError, match='no CLIENTS executor'):
            run(fed.create_value(1, sh.type_at_clients(tf.int32, all_equal=True)))
        fed.close()
        # ... where CLIENTS: [] is zero clients.
        fed = FederatingExecutor(
            FederatedResolvingStrategy.factory({sh.SERVER: EagerTFExecutor(), sh.CLIENTS: []}),
            EagerTFExecutor(),
        )
        try:
            assert fed.strategy.num_clients == 0
            v = run(fed.create_value([], sh.type_at_clients(tf.int32)))
            assert v.type_signature == sh.type_at_clients(tf.int32)
        finally:
            fed.close()

    def test_factory_errors(self):
        with pytest.raises(ValueError, match='no SERVER'):
            FederatedResolvingStrategy.factory({sh.CLIENTS: [EagerTFExecutor()]})
        with pytest.raises(TypeError, match='client executor 0 is a str'):
            FederatedResolvingStrategy.factory({sh.SERVER: EagerTFExecutor(), sh.CLIENTS: ['x']})
        with pytest.raises(TypeError, match='needs client groups'):
            FederatedResolvingStrategy.factory(EagerTFExecutor())


# ---------------------------------------------------------------- on every stack


@sh.federated_computation(sh.type_at_clients(sh.SequenceType(tf.int32)))
def sums_at_clients(xs):
    return sh.federated_map(ds_sum, xs)


@sh.federated_computation(sh.type_at_clients(sh.SequenceType(Point(tf.int32, tf.int32))))
def points_at_clients(xs):
    return sh.federated_map(point_sum, xs)


@sh.federated_computation(sh.type_at_clients(sh.SequenceType(Point(tf.int32, tf.int32))))
def points_back(xs):
    return sh.federated_map(point_identity, xs)


@sh.federated_computation(sh.type_at_clients([]))
def secure_sum_of_nothing(xs):
    return sh.federated_secure_sum_bitwidth(xs, [])


@sh.federated_computation(sh.type_at_clients([]))
def modular_sum_of_nothing(xs):
    return sh.federated_secure_modular_sum(xs, [])


def test_sequences_as_generator_functions(stack):
    def gen():
        yield from (np.int32(i) for i in range(4))

    assert ds_sum(gen) == 6
    assert ds_sum(lambda: iter([1, 2])) == 3
    with stack.clients(3):
        assert sums_at_clients(
            [gen, [5, 6], tf.data.Dataset.range(3).map(lambda i: tf.cast(i, tf.int32))]
        ) == [6, 11, 3]


def test_namedtuple_datasets_travel_both_ways(stack):
    ds = tf.data.Dataset.from_tensor_slices(Point([1, 2], [3, 4]))
    with stack.clients(2):
        assert points_at_clients([ds, [Point(2, 5)]]) == [11, 10]
        out = listed(points_back([ds, [Point(2, 5)]]))
    assert out == [[Point(1, 3), Point(2, 4)], [Point(2, 5)]]
    assert all(type(p) is Point for client in out for p in client)


def test_secure_sums_of_an_empty_struct(stack):
    with stack.clients(3):
        assert secure_sum_of_nothing([[], [], []]) == []
        assert modular_sum_of_nothing([[], [], []]) == []
