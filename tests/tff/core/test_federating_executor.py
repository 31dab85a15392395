"""TFF 0.19's raw-API contracts for building blocks (``core/impl/executors/
federating_executor_test.py`` and ``reference_resolving_executor_test.py`` of that release;
the full ports are in tests/tff/executors019/).

A struct, selection or call building block is evaluated by the stack's reference-resolving
layer (the top of every stack); the federating layer below refuses it, and a reference,
with a ValueError, as TFF's does; the `federated_map_all_equal` intrinsic runs when called
raw. Runs on the thread stack (no TF graph crosses a process here).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness import framework
from simharness.core import building_blocks as bb


@tff.tensorflow.computation(np.int32)
def _add_one(x):
    return x + 1


@tff.tensorflow.computation
def _five():
    return tf.constant(5)


@pytest.fixture
def stack():
    top = framework.local_executor_factory().create_executor({tff.CLIENTS: 3})
    yield top  # the ReferenceResolvingExecutor over the FederatingExecutor
    top.close()


@pytest.fixture
def federating(stack):
    return stack.target


def _value(ex, comp):
    async def go():
        v = await ex.create_value(comp)
        return v.type_signature, await v.compute()

    return asyncio.run(go())


def test_call_struct_and_selection_blocks(stack, federating):
    call = bb.Call(_add_one.to_building_block(), bb.Call(_five.to_building_block()))
    with pytest.raises(ValueError, match='Unsupported computation building block of type Call'):
        _value(federating, call)
    t, v = _value(stack, call)
    assert str(t) == 'int32' and int(v) == 6
    struct = bb.Struct([('a', call), ('b', bb.Call(_five.to_building_block()))])
    t, v = _value(stack, struct)
    assert str(t) == '<a=int32,b=int32>' and (int(v.a), int(v.b)) == (6, 5)
    t, v = _value(stack, bb.Selection(struct, name='b'))
    assert int(v) == 5


def test_intrinsic_call_blocks(stack):
    at_clients = bb.Call(
        bb.Intrinsic(
            'federated_eval_at_clients',
            tff.FunctionType(_five.type_signature, tff.type_at_clients(np.int32)),
        ),
        _five.to_building_block(),
    )
    t, v = _value(stack, at_clients)
    assert t == tff.type_at_clients(np.int32) and [int(x) for x in v] == [5, 5, 5]
    all_equal = tff.FederatedType(np.int32, tff.CLIENTS, all_equal=True)
    placed = bb.Call(
        bb.Intrinsic('federated_value_at_clients', tff.FunctionType(np.int32, all_equal)),
        bb.Call(_five.to_building_block()),
    )
    mapped = bb.Call(
        bb.Intrinsic(
            'federated_map_all_equal',
            tff.FunctionType([_add_one.type_signature, all_equal], all_equal),
        ),
        bb.Struct([(None, _add_one.to_building_block()), (None, placed)]),
    )
    t, v = _value(stack, mapped)
    assert t == all_equal and int(v) == 6


def test_reference_is_refused(federating):
    with pytest.raises(ValueError, match='Reference'):
        _value(federating, bb.Reference('x', np.int32))
