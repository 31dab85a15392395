"""Unit tests of simharness.context: cardinality inference, result conversion, context lifecycle."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness import context as ctx_mod
from simharness.core import types as T
from simharness.errors import (
    CardinalityError,
    ExecutorClosedError,
    SimharnessTypeError,
    SimharnessValueError,
    WorkerCrashedError,
)
from simharness.executors.base import ExecutorFactory
from simharness.stacks import local_executor_factory

F32_AT_C = sh.type_at_clients(tf.float32)


@sh.federated_computation(F32_AT_C)
def fed_sum(xs):
    return sh.federated_sum(xs)


class TestInferCardinality:
    def test_client_lists(self):
        assert ctx_mod.infer_cardinality([1.0, 2.0], F32_AT_C) == 2
        assert ctx_mod.infer_cardinality([], F32_AT_C) == 0
        assert ctx_mod.infer_cardinality(1.0, sh.type_at_server(tf.float32)) is None
        assert (
            ctx_mod.infer_cardinality(1.0, sh.type_at_clients(tf.float32, all_equal=True)) is None
        )
        assert ctx_mod.infer_cardinality(1.0, T.TensorType(tf.float32)) is None

    def test_nested_structs(self):
        t = T.StructType([('a', F32_AT_C), ('b', [T.TensorType(tf.int32), F32_AT_C])])
        assert ctx_mod.infer_cardinality({'a': [1.0, 2.0], 'b': [3, [4.0, 5.0]]}, t) == 2
        with pytest.raises(
            CardinalityError,
            match=r'argument\[b\].* holds a list of 3 values, but '
            r'the argument\[a\] holds 2',
        ) as e:
            ctx_mod.infer_cardinality({'a': [1.0, 2.0], 'b': [3, [4.0, 5.0, 6.0]]}, t)
        assert (e.value.expected, e.value.actual) == (2, 3)

    def test_not_a_list(self):
        with pytest.raises(
            SimharnessTypeError, match=r'\{float32\}@CLIENTS, which needs a list .* got dict'
        ):
            ctx_mod.infer_cardinality({'x': 1.0}, F32_AT_C)


class TestToPython:
    def test_scalars_and_containers(self):
        Point = collections.namedtuple('Point', 'x y')
        t = T.to_type(Point(tf.float32, [tf.int32]))
        out = ctx_mod.to_python(
            sh.Struct([('x', tf.constant(1.0)), ('y', sh.Struct([(None, np.array(2, np.int32))]))]),
            t,
        )
        assert type(out) is Point and out.x == 1.0 and out.y == [2] and type(out.y) is list
        assert isinstance(out.x, np.float32)

    def test_federated(self):
        assert ctx_mod.to_python([tf.constant(1.0), tf.constant(2.0)], F32_AT_C) == [1.0, 2.0]
        assert ctx_mod.to_python(tf.constant(3.0), sh.type_at_server(tf.float32)) == 3.0

    def test_sequences(self):
        ds = tf.data.Dataset.from_tensor_slices({'a': np.array([1, 2], np.int32)})
        out = ctx_mod.to_python(ds, sh.SequenceType({'a': tf.int32}))
        assert isinstance(out, tf.data.Dataset)  # as TFF's contexts return a sequence
        assert list(out.as_numpy_iterator()) == [{'a': 1}, {'a': 2}]
        as_list = ctx_mod.to_python([{'a': 3}], sh.SequenceType({'a': tf.int32}))
        assert list(as_list.as_numpy_iterator()) == [{'a': 3}]

    def test_sequences_of_elements_of_different_shapes(self):
        # A type with an unknown dimension: the elements are concatenated, not stacked.
        t = sh.SequenceType(T.TensorType(np.int32, [None]))
        out = ctx_mod.to_python([np.array([1, 2], np.int32), np.array([3], np.int32)], t)
        assert out.element_spec == tf.TensorSpec([None], tf.int32)
        assert [list(x) for x in out.as_numpy_iterator()] == [[1, 2], [3]]
        empty = ctx_mod.to_python([], t)
        assert empty.element_spec.dtype == tf.int32 and list(empty) == []


class CrashingOnceFactory(ExecutorFactory):
    """Raises a retryable error on the first `failures` stack requests."""

    def __init__(self, failures):
        self.inner = local_executor_factory()
        self.failures = failures
        self.requests = 0

    def create_executor(self, cardinalities):
        self.requests += 1
        if self.requests <= self.failures:
            raise WorkerCrashedError('worker 0 died', worker_id=0, pid=1, exitcode=-9)
        return self.inner.create_executor(cardinalities)

    def clean_up_executors(self):
        self.inner.clean_up_executors()


class TestExecutionContext:
    def test_argument_validation(self):
        with pytest.raises(SimharnessTypeError, match='must be an ExecutorFactory, got str'):
            sh.ExecutionContext('local')
        with pytest.raises(SimharnessValueError, match='retries must be an int >= 0, got -1'):
            sh.ExecutionContext(local_executor_factory(), retries=-1)

    def test_retries_after_a_retryable_error(self):
        factory = CrashingOnceFactory(failures=1)
        with sh.execution_context(factory, retries=1):
            assert fed_sum([1.0, 2.0]) == 3.0
        assert factory.requests == 2
        factory = CrashingOnceFactory(failures=2)
        with sh.execution_context(factory, retries=1):
            with pytest.raises(WorkerCrashedError, match='worker 0 died'):
                fed_sum([1.0, 2.0])

    def test_close_is_idempotent_and_final(self):
        factory = local_executor_factory()
        context = sh.ExecutionContext(factory)
        assert context.invoke(fed_sum, [1.0, 2.0]) == 3.0
        assert factory.cached_cardinalities == [2]
        context.close()
        context.close()
        assert factory.cached_cardinalities == []
        assert not context._thread.is_alive()  # the loop thread is stopped
        with pytest.raises(ExecutorClosedError):
            context.invoke(fed_sum, [1.0])
        assert factory.cached_cardinalities == []  # no stack built for a closed context

    def test_nested_contexts_and_close_false(self):
        outer_factory, inner_factory = local_executor_factory(), local_executor_factory()
        with sh.execution_context(outer_factory) as outer:
            assert sh.get_context() is outer
            with sh.execution_context(inner_factory, close=False) as inner:
                assert sh.get_context() is inner
                fed_sum([1.0])
            assert sh.get_context() is outer
            assert inner_factory.cached_cardinalities == [1]  # not closed
            inner.close()
            assert inner_factory.cached_cardinalities == []

    def test_default_context(self):
        default_factory = local_executor_factory()
        sh.set_default_executor(default_factory)
        try:
            assert sh.get_context().factory is default_factory
            assert fed_sum([2.0, 3.0]) == 5.0
            assert default_factory.cached_cardinalities == [2]
        finally:
            sh.set_default_executor(None)
        assert default_factory.cached_cardinalities == []  # the old default was closed


def test_core_calls_go_to_the_context_installed_in_the_core_stack():
    # Core knows only "something with invoke": the execution layer installs into it.
    from simharness.core import context_stack

    class Recorder:
        def __init__(self):
            self.calls = []

        def invoke(self, comp, arg=None):
            self.calls.append((comp, arg))
            return 'recorded'

        def close(self):
            pass

    @sh.tf_computation(tf.int32)
    def inc(x):
        return x + 1

    rec = Recorder()
    with context_stack.install(rec):
        assert inc(np.int32(4)) == 'recorded'
        assert context_stack.get_context() is rec
    assert rec.calls == [(inc, np.int32(4))]
    assert inc(np.int32(4)) == 5  # outside: the default context the execution layer made
    assert isinstance(context_stack.get_context(), sh.ExecutionContext)


def test_a_context_left_at_interpreter_exit_or_from_another_context_leaves_quietly(monkeypatch):
    """A `with execution_context(...)` never left (its generator closed by the garbage
    collector, at interpreter exit when the modules' globals may be gone already, or in
    another `contextvars` context than its own) leaves without an error, and the context
    it was current in is not changed by it."""
    import contextvars

    from simharness.core import context_stack

    marker = object()
    here = context_stack._CURRENT.get()
    cm = context_stack.install(marker)
    own = contextvars.copy_context()
    assert own.run(cm.__enter__) is marker
    contextvars.Context().run(cm.__exit__, None, None, None)  # another context: nothing
    assert own.run(context_stack._CURRENT.get) is marker
    assert context_stack._CURRENT.get() is here

    cm = context_stack.install(marker)
    assert cm.__enter__() is marker
    monkeypatch.setattr(context_stack, '_CURRENT', None)  # the module's globals gone
    cm.__exit__(None, None, None)
    monkeypatch.undo()
    assert context_stack._CURRENT.get() is here
