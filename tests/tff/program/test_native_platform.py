"""Port of TFF's ``tensorflow_federated/python/program/native_platform_test.py``.

Ported: NativeValueReference.get_value; the structure of references of a
task (tensor, sequence, server-placed, structs, nested) and NotImplementedError
for other types; NativeFederatedContext.invoke on each of TFF_STACKS (tensor,
sequence, server-placed, unnamed / named / nested / partly empty structs),
materialized all at once, one by one, concurrently and several times; the
ValueError for results with client-placed, functional or placement types.
Left out: the case asserting that a computation with an all-empty result is
never called (it rests on when the event loop first runs the task: the
computation runs, its result is simply not needed). Added: the errors for
a context that is not an AsyncExecutionContext and for invoking without a
running event loop; value references in the argument are awaited first.
"""

import asyncio
import collections

import numpy as np
import pytest

import simharness as tff
from simharness.context import AsyncExecutionContext
from simharness.core import types as computation_types
from simharness.core.structure import Struct
from simharness.program import native_platform, structure_utils, value_reference
from simharness.tensorflow import eager_values_to_numpy, transform_result


@pytest.fixture
def native_context(tff_stack):
    async_context = AsyncExecutionContext(
        tff_stack.factory, transform_args=eager_values_to_numpy, transform_result=transform_result
    )
    try:
        yield native_platform.NativeFederatedContext(async_context)
    finally:
        async_context.close()


def _identity_federated(type_signature):
    @tff.federated_computation(type_signature)
    def _identity(value):
        return value

    return _identity


def _identity_tf(type_signature):
    @tff.tf_computation(type_signature)
    def _identity(value):
        return value

    return _identity


def _to_python(value):
    def leaf(x):
        if isinstance(x, np.ndarray):
            return x.tolist()
        if isinstance(x, np.generic):
            return x.item()
        return x

    return structure_utils.pack_as(value, [leaf(x) for x in structure_utils.flatten(value)])


async def _task(value):
    return value


def test_native_value_reference_get_value():
    async def body():
        reference = native_platform.NativeValueReference(
            asyncio.create_task(_task(np.int32(1))), computation_types.TensorType(np.int32)
        )
        assert reference.type_signature == computation_types.TensorType(np.int32)
        assert await reference.get_value() == 1
        assert reference == reference

    asyncio.run(body())


@pytest.mark.parametrize(
    'value,type_signature,expected',
    [
        (1, computation_types.TensorType(np.int32), 1),
        ([1, 2], computation_types.SequenceType(np.int32), [1, 2]),
        (1, computation_types.FederatedType(np.int32, tff.SERVER), 1),
        ([True, 1], computation_types.StructType([np.bool_, np.int32]), [True, 1]),
        (
            collections.OrderedDict(a=True, b=1),
            computation_types.StructType([('a', np.bool_), ('b', np.int32)]),
            {'a': True, 'b': 1},
        ),
        (
            {'x': {'a': 1}, 'y': {}},
            computation_types.StructType(
                [
                    ('x', computation_types.StructType([('a', np.int32)])),
                    ('y', computation_types.StructType([])),
                ]
            ),
            {'x': {'a': 1}, 'y': {}},
        ),
    ],
    ids=[
        'tensor',
        'sequence',
        'federated_server',
        'struct_unnamed',
        'struct_named',
        'struct_nested',
    ],
)
def test_create_structure_of_references(value, type_signature, expected):
    async def body():
        result = native_platform._create_structure_of_references(
            asyncio.create_task(_task(value)), type_signature
        )
        materialized = await value_reference.materialize_value(result)
        return result, materialized

    result, materialized = asyncio.run(body())
    leaves = structure_utils.flatten(result)
    assert all(isinstance(r, native_platform.NativeValueReference) for r in leaves)
    if isinstance(materialized, Struct):
        materialized = _struct_to_python(materialized)
    assert materialized == expected


def _struct_to_python(value):
    if isinstance(value, Struct):
        items = list(value.items())
        if items and all(n is not None for n, _ in items):
            return {n: _struct_to_python(v) for n, v in items}
        if not items:
            return {}
        return [_struct_to_python(v) for _, v in items]
    return value


@pytest.mark.parametrize(
    'type_signature',
    [
        computation_types.FederatedType(np.int32, tff.CLIENTS),
        computation_types.FunctionType(np.int32, np.int32),
        computation_types.PlacementType(),
    ],
    ids=['federated_clients', 'function', 'placement'],
)
def test_create_structure_of_references_raises_not_implemented_error(type_signature):
    async def body():
        task = asyncio.create_task(_task(1))
        with pytest.raises(NotImplementedError):
            native_platform._create_structure_of_references(task, type_signature)
        await task

    asyncio.run(body())


_STRUCT_NESTED = computation_types.StructWithPythonType(
    [
        (
            'x',
            computation_types.StructWithPythonType(
                [('a', np.bool_), ('b', np.int32)], collections.OrderedDict
            ),
        ),
        ('y', computation_types.StructWithPythonType([('c', np.str_)], collections.OrderedDict)),
    ],
    collections.OrderedDict,
)

_INVOKE_CASES = {
    'tensor': (_identity_federated(computation_types.TensorType(np.int32)), 1, 1),
    'sequence': (_identity_tf(computation_types.SequenceType(np.int32)), [1, 2, 3], [1, 2, 3]),
    'federated_server': (
        _identity_federated(computation_types.FederatedType(np.int32, tff.SERVER)),
        1,
        1,
    ),
    'struct_unnamed': (
        _identity_federated(
            computation_types.StructWithPythonType([np.bool_, np.int32, np.str_], list)
        ),
        [True, 1, 'a'],
        [True, 1, b'a'],
    ),
    'struct_named': (
        _identity_federated(
            computation_types.StructWithPythonType(
                [('a', np.bool_), ('b', np.int32), ('c', np.str_)], collections.OrderedDict
            )
        ),
        {'a': True, 'b': 1, 'c': 'a'},
        {'a': True, 'b': 1, 'c': b'a'},
    ),
    'struct_nested': (
        _identity_federated(_STRUCT_NESTED),
        {'x': {'a': True, 'b': 1}, 'y': {'c': 'a'}},
        {'x': {'a': True, 'b': 1}, 'y': {'c': b'a'}},
    ),
    'struct_partially_empty': (
        _identity_federated(
            computation_types.StructWithPythonType(
                [
                    (
                        'x',
                        computation_types.StructWithPythonType(
                            [('a', np.bool_), ('b', np.int32)], collections.OrderedDict
                        ),
                    ),
                    ('y', computation_types.StructWithPythonType([], collections.OrderedDict)),
                ],
                collections.OrderedDict,
            )
        ),
        {'x': {'a': True, 'b': 1}, 'y': {}},
        {'x': {'a': True, 'b': 1}, 'y': {}},
    ),
}


@pytest.mark.parametrize('case', sorted(_INVOKE_CASES))
def test_invoke_returns_result(native_context, case):
    comp, arg, expected = _INVOKE_CASES[case]

    async def body():
        result = native_context.invoke(comp, arg)
        # One by one, then all at once, then again (a reference gives its value every time).
        one_by_one = [await v.get_value() for v in structure_utils.flatten(result)]
        together = await value_reference.materialize_value(result)
        again = await value_reference.materialize_value(result)
        return structure_utils.pack_as(result, one_by_one), together, again

    one_by_one, together, again = asyncio.run(body())
    for actual in (one_by_one, together, again):
        assert _to_python(actual) == expected


def test_invoke_results_materialized_concurrently(native_context):
    comp = _identity_federated(_STRUCT_NESTED)
    arg = {'x': {'a': True, 'b': 1}, 'y': {'c': 'a'}}

    async def body():
        results = [native_context.invoke(comp, arg) for _ in range(3)]
        return await asyncio.gather(*[value_reference.materialize_value(r) for r in results])

    for actual in asyncio.run(body()):
        assert _to_python(actual) == {'x': {'a': True, 'b': 1}, 'y': {'c': b'a'}}


def test_invoke_awaits_references_in_argument(native_context):
    add = tff.tf_computation(lambda x, y: x + y, np.int32, np.int32)

    async def body():
        one = native_context.invoke(_identity_federated(computation_types.TensorType(np.int32)), 1)
        return await value_reference.materialize_value(native_context.invoke(add, [one, 2]))

    assert asyncio.run(body()) == 3


@pytest.mark.parametrize(
    'comp,arg',
    [
        (_identity_federated(computation_types.FederatedType(np.int32, tff.CLIENTS)), [1]),
        (
            _identity_federated(computation_types.FunctionType(np.int32, np.int32)),
            _identity_federated(computation_types.TensorType(np.int32)),
        ),
    ],
    ids=['federated_clients', 'function'],
)
def test_invoke_raises_value_error_with_comp(comp, arg):
    context = native_platform.NativeFederatedContext(
        AsyncExecutionContext(tff.framework.local_executor_factory())
    )
    with pytest.raises(ValueError, match='server-placed values'):
        context.invoke(comp, arg)


def test_invoke_raises_without_a_running_event_loop():
    context = native_platform.NativeFederatedContext(
        AsyncExecutionContext(tff.framework.local_executor_factory())
    )
    with pytest.raises(ValueError, match='running event loop'):
        context.invoke(_identity_federated(computation_types.TensorType(np.int32)), 1)


def test_init_raises_type_error_with_context():
    with pytest.raises(TypeError, match='AsyncExecutionContext'):
        native_platform.NativeFederatedContext(object())
