"""Ports of federated-language's ``context_stack/context_stack_impl_test.py`` and
``context_stack/context_stack_test_utils_test.py`` (``with_context``), and checks of the
context classes TFF's programs subclass and pass: `SyncContext` / `AsyncContext`,
`set_no_default_context`, `cardinality_inference_fn`, TFF's native compiler functions.

Left out: ``ContextStack(default_context)`` constructed by hand (federated-language's
private class; simharness has one process-wide stack, tested through
`get_context_stack()`), and the cases that patch ``contextlib.ExitStack`` (an
implementation detail of TFF's decorator).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import simharness as federated_language
import simharness as tff
from simharness.core import context_stack as core_stack

framework = federated_language.framework


class _TestContext(framework.SyncContext):
    """A user's context (TFF's tests define one like it): `invoke` only, no `close`."""

    def __init__(self):
        self.calls = []

    def invoke(self, comp, arg):
        self.calls.append((comp, arg))
        return 'from the test context'


@pytest.fixture
def restore_default():
    yield
    core_stack.replace_default(None, owned=True)


@tff.tensorflow.computation(np.int32)
def _add_one(x):
    return x + 1


def test_set_default_context_with_context(restore_default):
    stack = framework.get_context_stack()
    test_context = _TestContext()
    assert stack.current is not test_context
    framework.set_default_context(test_context)
    assert stack.current is test_context
    assert _add_one(1) == 'from the test context'
    assert test_context.calls == [(_add_one, 1)]
    # Replacing a default the user set leaves it alone (it has no close() anyway).
    framework.set_default_context(None)
    assert _add_one(1) == 2


def test_install_pushes_context_on_stack():
    stack = framework.get_context_stack()
    default = stack.current
    two, three = _TestContext(), _TestContext()
    with stack.install(two):
        assert stack.current is two
        with stack.install(three):
            assert stack.current is three
        assert stack.current is two
    assert stack.current is default


def test_contexts_are_sync_or_async_contexts():
    ex = framework.local_executor_factory()
    sync_ctx = framework.ExecutionContext(ex)
    async_ctx = framework.AsyncExecutionContext(ex)
    try:
        assert isinstance(sync_ctx, framework.SyncContext)
        assert not isinstance(sync_ctx, framework.AsyncContext)
        assert isinstance(async_ctx, framework.AsyncContext)
        assert not isinstance(async_ctx, framework.SyncContext)
        with pytest.raises(TypeError):
            framework.SyncContext()  # abstract: invoke is not defined
    finally:
        sync_ctx.close()
        async_ctx.close()


@pytest.mark.parametrize('call', ['no_arg', 'args', 'kwargs', 'return'])
def test_with_context_installs_context_fn_sync(call):
    test_context = _TestContext()
    stack = framework.get_context_stack()

    @framework.with_context(lambda: test_context)
    def foo(*args, **kwargs):
        assert stack.current is test_context
        return (args, kwargs)

    assert not asyncio.iscoroutinefunction(foo)
    assert stack.current is not test_context
    args, kwargs = {
        'no_arg': ((), {}),
        'args': ((1,), {}),
        'kwargs': ((), {'x': 1}),
        'return': ((), {}),
    }[call]
    assert foo(*args, **kwargs) == (args, kwargs)
    assert stack.current is not test_context


@pytest.mark.parametrize('call', ['no_arg', 'args', 'kwargs', 'return'])
def test_with_context_installs_context_fn_async(call):
    test_context = _TestContext()
    stack = framework.get_context_stack()

    @framework.with_context(lambda: test_context)
    async def foo(*args, **kwargs):
        await asyncio.sleep(0)
        assert stack.current is test_context
        return (args, kwargs)

    assert asyncio.iscoroutinefunction(foo)
    args, kwargs = {
        'no_arg': ((), {}),
        'args': ((1,), {}),
        'kwargs': ((), {'x': 1}),
        'return': ((), {}),
    }[call]
    assert asyncio.run(foo(*args, **kwargs)) == (args, kwargs)
    assert stack.current is not test_context


def test_with_context_refuses_what_is_not_callable():
    with pytest.raises(TypeError, match='callable'):
        framework.with_context(_TestContext())


def test_set_no_default_context(restore_default):
    framework.set_no_default_context()
    assert isinstance(framework.get_context_stack().current, framework.RuntimeErrorContext)
    with pytest.raises(RuntimeError, match='No default context installed'):
        _add_one(1)
    with framework.get_context_stack().install(
        tff.backends.test.create_sync_test_cpp_execution_context()
    ) as ctx:
        assert _add_one(1) == 2
    ctx.close()
    framework.set_default_context(None)  # back to a local thread stack
    assert _add_one(2) == 3


def test_cardinality_inference_fn_is_called_and_checked():
    seen = []

    def three_clients(arg, type_spec):
        seen.append((arg, type_spec))
        return {federated_language.CLIENTS: 3}

    at_clients = federated_language.FederatedType(np.int32, federated_language.CLIENTS)

    @federated_language.federated_computation(at_clients)
    def identity(x):
        return x

    @federated_language.federated_computation
    def ones():
        return federated_language.federated_eval(
            tff.tensorflow.computation(lambda: np.int32(1)), federated_language.CLIENTS
        )

    ex = framework.local_executor_factory()
    ctx = framework.SyncExecutionContext(ex, cardinality_inference_fn=three_clients)
    try:
        with framework.get_context_stack().install(ctx):
            assert identity([4, 5, 6]) == [4, 5, 6]
            assert seen == [([4, 5, 6], at_clients)]
            assert ones() == [1]  # no argument: not called, the factory's default (1)
            assert len(seen) == 1
            with pytest.raises(ValueError):
                identity([4, 5])  # two values for three clients
    finally:
        ctx.close()
    for bad, error in (
        ([3], TypeError),
        ({'clients': 3}, TypeError),
        ({federated_language.CLIENTS: -1}, ValueError),
    ):
        ctx = framework.SyncExecutionContext(ex, cardinality_inference_fn=lambda a, t: bad)
        try:
            with (
                framework.get_context_stack().install(ctx),
                pytest.raises(error, match='cardinality_inference_fn'),
            ):
                identity([1, 2, 3])
        finally:
            ctx.close()
    with pytest.raises(TypeError, match='cardinality_inference_fn must be callable'):
        framework.SyncExecutionContext(ex, cardinality_inference_fn=3)
    ex.close()


def test_native_compiler_functions_return_the_computation():
    assert tff.backends.native.transform_to_native_form(_add_one) is _add_one
    assert tff.backends.native.desugar_and_transform_to_native(_add_one) is _add_one
    with pytest.raises(TypeError, match='expected a computation'):
        tff.backends.native.transform_to_native_form(lambda x: x)
    ctx = framework.SyncExecutionContext(
        framework.local_executor_factory(),
        compiler_fn=tff.backends.native.desugar_and_transform_to_native,
    )
    try:
        with framework.get_context_stack().install(ctx):
            assert _add_one(41) == 42
    finally:
        ctx.close()


def test_type_to_py_container():
    t = federated_language.StructWithPythonType([('a', np.int32), ('b', np.float32)], dict)
    value = tff.structure.Struct([('a', 1), ('b', 2.0)])
    assert framework.type_to_py_container(value, t) == {'a': 1, 'b': 2.0}
    at_clients = federated_language.FederatedType(t, federated_language.CLIENTS)
    assert framework.type_to_py_container([value, value], at_clients) == [{'a': 1, 'b': 2.0}] * 2
    with pytest.raises(TypeError, match='expected `list`'):
        framework.type_to_py_container(value, at_clients)
    seq = federated_language.SequenceType(t)
    assert framework.type_to_py_container([value], seq) == [{'a': 1, 'b': 2.0}]
    assert framework.type_to_py_container(3, np.int32) == 3
