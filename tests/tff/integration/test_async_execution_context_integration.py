"""Port of TFF's ``tensorflow_federated/python/tests/async_execution_context_integration_test.py``.
No case left out.

TFF's cases each build `tff.framework.local_cpp_executor_factory()` (here a pool of worker
processes); one factory serves the module here (closed at its end), each case making its
own `AsyncExecutionContext` on it, as TFF's do.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import simharness as federated_language
import simharness as tff


@pytest.fixture(scope='module')
def factory():
    f = tff.framework.local_cpp_executor_factory()
    yield f
    f.close()


@pytest.fixture
def closing():
    """Closes the contexts a case made (their loop threads), after it."""
    made = []
    yield made.append
    for ctx in made:
        ctx.close()


def _run(coro):
    return asyncio.run(coro)


def test_install_and_execute_in_context(factory, closing):
    context = federated_language.framework.AsyncExecutionContext(factory)
    closing(context)

    @federated_language.federated_computation(np.int32)
    def identity(x):
        return x

    async def body():
        with federated_language.framework.get_context_stack().install(context):
            assert await identity(1) == 1

    _run(body())


def test_install_and_execute_computations_with_different_cardinalities(factory, closing):
    context = federated_language.framework.AsyncExecutionContext(factory)
    closing(context)

    @federated_language.federated_computation(
        federated_language.FederatedType(np.int32, federated_language.CLIENTS)
    )
    def repackage_arg(x):
        return [x, x]

    async def body():
        with federated_language.framework.get_context_stack().install(context):
            assert await repackage_arg([1]) == [[1], [1]]
            assert await repackage_arg([1, 2]) == [[1, 2], [1, 2]]

    _run(body())


def test_runs_cardinality_free(factory, closing):
    context = federated_language.framework.AsyncExecutionContext(
        factory, cardinality_inference_fn=lambda arg, type_spec: {}
    )
    closing(context)

    @federated_language.federated_computation(np.int32)
    def identity(x):
        return x

    async def body():
        with federated_language.framework.get_context_stack().install(context):
            assert await identity(0) == 0  # independent of cardinalities

    _run(body())


def test_raises_exception(factory, closing):
    seen = []

    def one_client(arg, type_spec):
        seen.append((arg, type_spec))
        return {federated_language.CLIENTS: 1}

    context = federated_language.framework.AsyncExecutionContext(
        factory, cardinality_inference_fn=one_client
    )
    closing(context)
    arg_type = federated_language.FederatedType(np.int32, federated_language.CLIENTS)

    @federated_language.federated_computation(arg_type)
    def identity(x):
        return x

    async def body():
        with federated_language.framework.get_context_stack().install(context):
            # The argument has two clients; the inference function says one.
            with pytest.raises(Exception):
                await identity([0, 1])

    _run(body())
    assert seen == [([0, 1], arg_type)]
