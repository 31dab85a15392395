"""TFF 0.19's ``FederatingExecutor`` raw-API contracts (``core/impl/executors/
federating_executor_test.py`` of that release): building blocks given to
``create_value`` as they are.

TFF's test module is not in today's TFF; these cases follow its contract:
a struct, selection or call building block of compiled computations, intrinsics
and placements is embedded and evaluated part by part; a reference (a name only
a reference-resolving layer binds) is refused with a TypeError; and the
`federated_map_all_equal` intrinsic runs when called raw. Runs on the thread
stack's federating layer (no TF graph crosses a process here).
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
def federating():
    stack = framework.local_executor_factory().create_executor({tff.CLIENTS: 3})
    yield stack.target  # the FederatingExecutor under the reference-resolving layer
    stack.close()


def _value(ex, comp):
    async def go():
        v = await ex.create_value(comp)
        return v.type_signature, await v.compute()
    return asyncio.run(go())


def test_call_struct_and_selection_blocks(federating):
    call = bb.Call(_add_one.to_building_block(), bb.Call(_five.to_building_block()))
    t, v = _value(federating, call)
    assert str(t) == 'int32' and int(v) == 6
    struct = bb.Struct([('a', call), ('b', bb.Call(_five.to_building_block()))])
    t, v = _value(federating, struct)
    assert str(t) == '<a=int32,b=int32>' and (int(v.a), int(v.b)) == (6, 5)
    t, v = _value(federating, bb.Selection(struct, name='b'))
    assert int(v) == 5


def test_intrinsic_call_blocks(federating):
    at_clients = bb.Call(
        bb.Intrinsic('federated_eval_at_clients',
                     tff.FunctionType(_five.type_signature, tff.type_at_clients(np.int32))),
        _five.to_building_block())
    t, v = _value(federating, at_clients)
    assert t == tff.type_at_clients(np.int32) and [int(x) for x in v] == [5, 5, 5]
    all_equal = tff.FederatedType(np.int32, tff.CLIENTS, all_equal=True)
    placed = bb.Call(bb.Intrinsic('federated_value_at_clients',
                                  tff.FunctionType(np.int32, all_equal)),
                     bb.Call(_five.to_building_block()))
    mapped = bb.Call(
        bb.Intrinsic('federated_map_all_equal',
                     tff.FunctionType([_add_one.type_signature, all_equal], all_equal)),
        bb.Struct([(None, _add_one.to_building_block()), (None, placed)]))
    t, v = _value(federating, mapped)
    assert t == all_equal and int(v) == 6


def test_reference_is_refused(federating):
    with pytest.raises(TypeError, match='Reference'):
        _value(federating, bb.Struct([(None, bb.Reference('x', np.int32))]))
