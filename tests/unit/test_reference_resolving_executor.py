"""Unit tests of ReferenceResolvingExecutor over an EagerTF target (no threads)."""

from __future__ import annotations

import asyncio
import collections

import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.structure import Struct
from simharness.errors import ExecutorClosedError, SimharnessTypeError
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.reference_resolving import ReferenceResolvingExecutor


def run(coro):
    return asyncio.run(coro)


F32 = T.TensorType(tf.float32)


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.float32, tf.float32)
def add(a, b):
    return a + b


class RecordingExecutor(EagerTFExecutor):
    """An EagerTF target that counts what is delegated to it."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()
        self.closed_count = 0

    async def create_value(self, value, type_spec=None):
        self.counts['create_value'] += 1
        return await super().create_value(value, type_spec)

    async def create_call(self, comp, arg=None):
        self.counts['create_call'] += 1
        return await super().create_call(comp, arg)

    async def create_struct(self, elements):
        self.counts['create_struct'] += 1
        return await super().create_struct(elements)

    async def create_selection(self, source, index):
        self.counts['create_selection'] += 1
        return await super().create_selection(source, index)

    def close(self):
        self.closed_count += 1
        super().close()


@pytest.fixture
def target():
    return RecordingExecutor()


@pytest.fixture
def ex(target):
    with ReferenceResolvingExecutor(target) as executor:
        yield executor


def call(ex, comp, arg=None, arg_type=None):
    fn = run(ex.create_value(comp))
    a = None if arg is None else run(ex.create_value(arg, arg_type))
    return run(ex.create_call(fn, a))


def compute(value):
    out = run(value.compute())
    return out.numpy() if hasattr(out, 'numpy') else out


def test_identity_lambda(ex, target):
    lam = bb.Lambda('x', F32, bb.Reference('x', F32))
    out = call(ex, lam, 2.5, tf.float32)
    assert out.type_signature == F32 and compute(out) == 2.5
    assert target.counts['create_call'] == 0  # lambdas are evaluated in this layer


def test_block_evaluates_each_local_once(ex, target):
    comp = add_one.to_building_block()
    x = bb.Reference('x', F32)
    body = bb.Block(
        [('a', bb.Call(comp, x)), ('b', bb.Call(comp, bb.Reference('a', F32)))],
        bb.Struct(
            [
                (None, bb.Reference('a', F32)),
                ('b', bb.Reference('b', F32)),
                (None, bb.Reference('a', F32)),
            ]
        ),
    )
    out = call(ex, bb.Lambda('x', F32, body), 1.0, tf.float32)
    assert str(out.type_signature) == '<float32,b=float32,float32>'
    value = run(out.compute())
    assert isinstance(value, Struct) and [float(v) for v in value] == [2.0, 3.0, 2.0]
    assert target.counts['create_call'] == 2  # 'a' used twice, computed once


def test_closures_capture_their_scope(ex):
    inner = bb.Lambda(
        'y', F32, bb.Struct([(None, bb.Reference('x', F32)), (None, bb.Reference('y', F32))])
    )
    outer = bb.Lambda('x', F32, inner)
    closure = call(ex, outer, 1.0, tf.float32)
    assert isinstance(closure.type_signature, T.FunctionType)
    with pytest.raises(SimharnessTypeError, match='cannot be computed'):
        run(closure.compute())
    out = run(ex.create_call(closure, run(ex.create_value(2.0, tf.float32))))
    assert [float(v) for v in run(out.compute())] == [1.0, 2.0]


def test_selection_and_struct_stay_in_this_layer(ex, target):
    st = T.StructType([('a', F32), ('b', F32)])
    lam = bb.Lambda('p', st, bb.Selection(bb.Reference('p', st), name='b'))
    out = call(ex, lam, collections.OrderedDict(a=1.0, b=2.0), st)
    assert compute(out) == 2.0
    assert target.counts['create_selection'] == 0 and target.counts['create_struct'] == 0
    s = run(ex.create_struct([('u', run(ex.create_value(1.0, tf.float32)))]))
    assert str(s.type_signature) == '<u=float32>'
    assert compute(run(ex.create_selection(s, 0))) == 1.0


def test_struct_arguments_are_packed_for_target_calls(ex, target):
    out = call(ex, add.to_building_block(), [1.0, 2.5], add.type_signature.parameter)
    assert compute(out) == 3.5
    assert target.counts['create_struct'] == 1


def test_no_parameter_lambda(ex):
    const = bb.Call(sh.tf_computation(lambda: tf.constant(4.0)).to_building_block())
    out = call(ex, bb.Lambda(None, None, const))
    assert compute(out) == 4.0


def test_errors(ex):
    with pytest.raises(SimharnessTypeError, match="reference 'z' is not bound"):
        call(ex, bb.Lambda('x', F32, bb.Reference('z', F32)), 1.0, tf.float32)
    with pytest.raises(SimharnessTypeError, match='cannot call a value of type float32'):
        v = run(ex.create_value(1.0, tf.float32))
        run(ex.create_call(v, v))
    lam = bb.Lambda('x', F32, bb.Reference('x', F32))
    with pytest.raises(SimharnessTypeError, match='needs an argument'):
        run(ex.create_call(run(ex.create_value(lam))))


def test_close_closes_the_target_once(target):
    ex = ReferenceResolvingExecutor(target)
    ex.close()
    ex.close()
    assert target.closed_count == 1
    with pytest.raises(ExecutorClosedError):
        run(ex.create_value(1.0, tf.float32))


def test_a_compiled_computation_met_again_is_embedded_once(ex, target):
    comp = add_one.to_building_block()
    x = bb.Reference('x', F32)
    twice = bb.Lambda('x', F32, bb.Call(comp, bb.Call(comp, x)))
    fn = run(ex.create_value(twice))
    for k in range(3):  # a computation called every round
        out = run(ex.create_call(fn, run(ex.create_value(float(k), tf.float32))))
        assert compute(out) == k + 2.0
    # the argument each call, the compiled computation once (same object, same value)
    assert target.counts['create_value'] == 3 + 1
    other = bb.CompiledComputation(comp.graph, comp.type_signature, comp.name)
    assert other is not comp  # an equal computation, another object: a value of its own
    assert compute(call(ex, other, 1.0, tf.float32)) == 2.0
    assert target.counts['create_value'] == 3 + 1 + 2
