"""Port of TFF 0.19's ``core/impl/executors/executor_test_utils.py`` to simharness.

TFF's whimsy values are computation protos; here they are simharness's building blocks
of the same types and values (`CompiledComputation`s traced with
`tensorflow.computation`, `Intrinsic`, `Lambda`, `Placement`, `Reference`, `Selection`,
`Struct`, `Call`); TFF's ``(intrinsic_defs.X, type)`` pairs are simharness's registered
`IntrinsicDef`s (``building_blocks.uri_to_intrinsic_def``) and a concrete type. `executors()` parameterizes a test by the local (thread) stack only: TFF's
sizing executor has no counterpart here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import types

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

import simharness as tff
from simharness import framework
from simharness.core import building_blocks as bb
from simharness.core import context_stack
from simharness.core import types as T
from simharness.core.structure import Struct, map_structure

#: TFF 0.19's ``computation_types`` names, on simharness's types.
computation_types = types.SimpleNamespace(
    AbstractType=T.AbstractType,
    FederatedType=T.FederatedType,
    FunctionType=T.FunctionType,
    PlacementType=T.PlacementType,
    SequenceType=T.SequenceType,
    StructType=T.StructType,
    TensorType=T.TensorType,
    Type=T.Type,
    to_type=T.to_type,
    at_clients=T.type_at_clients,
    at_server=T.type_at_server,
)
#: TFF 0.19's ``placements`` names.
placements = types.SimpleNamespace(SERVER=tff.SERVER, CLIENTS=tff.CLIENTS)


def unary_op(t):
    return T.FunctionType(t, t)


def binary_op(t):
    return T.FunctionType(T.StructType([t, t]), t)


def reduction_op(result_type, element_type):
    return T.FunctionType(T.StructType([result_type, element_type]), result_type)


@contextlib.contextmanager
def install_executor(executor_factory_instance):
    """A context on the factory, current inside the block, then closed."""
    context = framework.ExecutionContext(executor_factory_instance)
    try:
        with context_stack.install(context):
            yield context
    finally:
        context.close()


def executors(*args):
    """TFF's decorator: runs the test inside a context of each named executor factory
    (default: the local thread stack)."""

    def decorator(fn, *named_executors):
        if isinstance(fn, type):
            raise TypeError(
                'Do not directly decorate classes with the executors decorator; '
                'decorate the member test functions instead.'
            )
        if not named_executors:
            named_executors = [('local', framework.local_executor_factory())]

        @parameterized.named_parameters(*named_executors)
        def wrapped_fn(self, executor):
            with install_executor(executor):
                fn(self)

        return wrapped_fn

    if len(args) == 1 and callable(args[0]):
        return decorator(args[0])
    return lambda fn: decorator(fn, *args)


class AsyncTestCase(absltest.TestCase):
    """A new event loop per test (TFF's)."""

    def setUp(self):
        super().setUp()
        self.loop = asyncio.new_event_loop()
        self.addCleanup(self.loop.close)

    def run_sync(self, coro):
        return self.loop.run_until_complete(coro)


class TracingExecutor(framework.Executor):
    """Keeps a log of all calls; executor values are numbered from 1 (TFF's)."""

    def __init__(self, target):
        if not isinstance(target, framework.Executor):
            raise TypeError(f'expected an Executor, got {type(target).__name__}')
        self._target = target
        self._last_used_index = 0
        self._trace = []

    @property
    def trace(self):
        return self._trace

    def _get_new_value_index(self):
        self._last_used_index += 1
        return self._last_used_index

    async def create_value(self, value, type_spec=None):
        target_val = await self._target.create_value(value, type_spec)
        wrapped = TracingExecutorValue(self, self._get_new_value_index(), target_val)
        if type_spec is not None:
            self._trace.append(('create_value', value, type_spec, wrapped.index))
        else:
            self._trace.append(('create_value', value, wrapped.index))
        return wrapped

    async def create_call(self, comp, arg=None):
        if arg is not None:
            target_val = await self._target.create_call(comp.value, arg.value)
            wrapped = TracingExecutorValue(self, self._get_new_value_index(), target_val)
            self._trace.append(('create_call', comp.index, arg.index, wrapped.index))
            return wrapped
        target_val = await self._target.create_call(comp.value)
        wrapped = TracingExecutorValue(self, self._get_new_value_index(), target_val)
        self._trace.append(('create_call', comp.index, wrapped.index))
        return wrapped

    async def create_struct(self, elements):
        target_val = await self._target.create_struct(map_structure(lambda x: x.value, elements))
        wrapped = TracingExecutorValue(self, self._get_new_value_index(), target_val)
        self._trace.append(
            ('create_struct', map_structure(lambda x: x.index, elements), wrapped.index)
        )
        return wrapped

    def close(self):
        self._target.close()

    async def create_selection(self, source, index=None, name=None):
        target_val = await self._target.create_selection(source.value, index)
        wrapped = TracingExecutorValue(self, self._get_new_value_index(), target_val)
        self._trace.append(('create_selection', source.index, index, wrapped.index))
        return wrapped


class TracingExecutorValue(framework.ExecutorValue):
    """A value of `TracingExecutor`."""

    def __init__(self, owner, index, value):
        if (
            not isinstance(owner, TracingExecutor)
            or not isinstance(index, int)
            or not isinstance(value, framework.ExecutorValue)
        ):
            raise TypeError('expected (TracingExecutor, int, ExecutorValue)')
        self._owner = owner
        self._index = index
        self._value = value

    @property
    def index(self):
        return self._index

    @property
    def value(self):
        return self._value

    @property
    def type_signature(self):
        return self._value.type_signature

    async def compute(self):
        result = await self._value.compute()
        self._owner.trace.append(('compute', self._index, result))
        return result


# ---------------------------------------------------------------- whimsy intrinsics


def _intrinsic(uri, type_signature):
    """TFF's ``(intrinsic_defs.X, type)``: the registered definition and a concrete type."""
    return bb.uri_to_intrinsic_def(uri), type_signature


F32 = T.TensorType(np.float32)


def create_whimsy_intrinsic_def_federated_aggregate():
    return _intrinsic(
        'federated_aggregate',
        T.FunctionType(
            [
                T.type_at_clients(np.float32),
                np.float32,
                reduction_op(F32, F32),
                binary_op(F32),
                T.FunctionType(np.float32, np.float32),
            ],
            T.type_at_server(np.float32),
        ),
    )


def create_whimsy_intrinsic_def_federated_apply():
    return _intrinsic(
        'federated_apply',
        T.FunctionType([unary_op(F32), T.type_at_server(np.float32)], T.type_at_server(np.float32)),
    )


def create_whimsy_intrinsic_def_federated_broadcast():
    return _intrinsic(
        'federated_broadcast',
        T.FunctionType(T.type_at_server(np.float32), T.type_at_clients(np.float32, all_equal=True)),
    )


def create_whimsy_intrinsic_def_federated_collect():
    return _intrinsic(
        'federated_collect',
        T.FunctionType(T.type_at_clients(np.float32), T.type_at_server(T.SequenceType(np.float32))),
    )


def create_whimsy_intrinsic_def_federated_eval_at_clients():
    return _intrinsic(
        'federated_eval_at_clients',
        T.FunctionType(T.FunctionType(None, np.float32), T.type_at_clients(np.float32)),
    )


def create_whimsy_intrinsic_def_federated_eval_at_server():
    return _intrinsic(
        'federated_eval_at_server',
        T.FunctionType(T.FunctionType(None, np.float32), T.type_at_server(np.float32)),
    )


def create_whimsy_intrinsic_def_federated_map():
    return _intrinsic(
        'federated_map',
        T.FunctionType(
            [unary_op(F32), T.type_at_clients(np.float32)], T.type_at_clients(np.float32)
        ),
    )


def create_whimsy_intrinsic_def_federated_map_all_equal():
    return _intrinsic(
        'federated_map_all_equal',
        T.FunctionType(
            [unary_op(F32), T.type_at_clients(np.float32, all_equal=True)],
            T.type_at_clients(np.float32, all_equal=True),
        ),
    )


def create_whimsy_intrinsic_def_federated_mean():
    return _intrinsic(
        'federated_mean',
        T.FunctionType(T.type_at_clients(np.float32), T.type_at_server(np.float32)),
    )


def create_whimsy_intrinsic_def_federated_secure_sum():
    return _intrinsic(
        'federated_secure_sum',
        T.FunctionType([T.type_at_clients(np.int32), np.int32], T.type_at_server(np.int32)),
    )


_SELECT_CLIENT_KEYS_TYPE = T.type_at_clients(T.TensorType(np.int32, [3]))
_SELECT_MAX_KEY_TYPE = T.type_at_server(np.int32)
_SELECT_SERVER_STATE_TYPE = T.type_at_server(np.str_)
_SELECTED_TYPE = T.to_type((np.str_, np.int32))
_SELECT_FN_TYPE = T.FunctionType((np.str_, np.int32), _SELECTED_TYPE)
_SELECT_RESULT_TYPE = T.type_at_clients(T.SequenceType(_SELECTED_TYPE))
_SELECT_TYPE = T.FunctionType(
    [_SELECT_CLIENT_KEYS_TYPE, _SELECT_MAX_KEY_TYPE, _SELECT_SERVER_STATE_TYPE, _SELECT_FN_TYPE],
    _SELECT_RESULT_TYPE,
)
_SELECT_NUM_CLIENTS = 3


def create_whimsy_intrinsic_def_federated_secure_select():
    return _intrinsic('federated_secure_select', _SELECT_TYPE)


def create_whimsy_intrinsic_def_federated_select():
    return _intrinsic('federated_select', _SELECT_TYPE)


def create_whimsy_federated_select_args():
    client_keys = [[0, 1, 2]] * _SELECT_NUM_CLIENTS
    select_fn = create_whimsy_computation_tensorflow_identity(_SELECTED_TYPE)
    return [
        (client_keys, _SELECT_CLIENT_KEYS_TYPE),
        (2, _SELECT_MAX_KEY_TYPE),
        ('abc', _SELECT_SERVER_STATE_TYPE),
        select_fn,
    ]


def create_whimsy_federated_select_expected_result():
    """Each client's dataset of selected elements."""
    return [
        tf.data.Dataset.from_tensor_slices((['abc'] * 3, [0, 1, 2]))
        for _ in range(_SELECT_NUM_CLIENTS)
    ]


def create_whimsy_intrinsic_def_federated_sum():
    return _intrinsic(
        'federated_sum', T.FunctionType(T.type_at_clients(np.float32), T.type_at_server(np.float32))
    )


def create_whimsy_intrinsic_def_federated_value_at_clients():
    return _intrinsic(
        'federated_value_at_clients',
        T.FunctionType(np.float32, T.type_at_clients(np.float32, all_equal=True)),
    )


def create_whimsy_intrinsic_def_federated_value_at_server():
    return _intrinsic(
        'federated_value_at_server', T.FunctionType(np.float32, T.type_at_server(np.float32))
    )


def create_whimsy_intrinsic_def_federated_weighted_mean():
    return _intrinsic(
        'federated_weighted_mean',
        T.FunctionType(
            [T.type_at_clients(np.float32), T.type_at_clients(np.float32)],
            T.type_at_server(np.float32),
        ),
    )


def create_whimsy_intrinsic_def_federated_zip_at_clients():
    return _intrinsic(
        'federated_zip_at_clients',
        T.FunctionType(
            [T.type_at_clients(np.float32), T.type_at_clients(np.float32)],
            T.type_at_clients([np.float32, np.float32]),
        ),
    )


def create_whimsy_intrinsic_def_federated_zip_at_server():
    return _intrinsic(
        'federated_zip_at_server',
        T.FunctionType(
            [T.type_at_server(np.float32), T.type_at_server(np.float32)],
            T.type_at_server([np.float32, np.float32]),
        ),
    )


# ---------------------------------------------------------------- whimsy computations


def create_whimsy_placement_literal():
    """A placement literal and its type."""
    return tff.SERVER, T.PlacementType()


def create_whimsy_computation_call():
    fn, fn_type = create_whimsy_computation_tensorflow_constant()
    return bb.Call(fn), fn_type.result


def create_whimsy_computation_intrinsic():
    """An intrinsic block (TFF: an intrinsic computation proto) and its type."""
    _, type_signature = create_whimsy_intrinsic_def_federated_eval_at_server()
    return bb.Intrinsic('federated_eval_at_server', type_signature), type_signature


def create_whimsy_computation_lambda_empty():
    """A lambda ``( -> <>)``."""
    value = bb.Lambda(None, None, bb.Struct([]))
    return value, T.FunctionType(None, [])


def create_whimsy_computation_lambda_identity():
    """A lambda ``(float32 -> float32)``."""
    value = bb.Lambda('a', F32, bb.Reference('a', F32))
    return value, T.FunctionType(F32, F32)


def create_whimsy_computation_placement():
    return bb.Placement(tff.SERVER), T.PlacementType()


def create_whimsy_computation_reference():
    return bb.Reference('a', F32), F32


def create_whimsy_computation_selection():
    source, source_type = create_whimsy_computation_tuple()
    return bb.Selection(source, index=0), source_type[0]


def _compiled(comp):
    return comp.to_building_block(), comp.type_signature


@functools.lru_cache(maxsize=None)  # traced once: the blocks are immutable
def create_whimsy_computation_tensorflow_add():
    """``(<float32,float32> -> float32)``."""

    @tff.tensorflow.computation(T.StructType([np.float32, np.float32]))
    def add(arg):
        return tf.add(arg[0], arg[1])

    return _compiled(add)


@functools.lru_cache(maxsize=None)  # traced once: the blocks are immutable
def create_whimsy_computation_tensorflow_constant():
    """``( -> float32)``, 10.0."""

    @tff.tensorflow.computation
    def constant():
        return tf.constant(10.0, tf.float32)

    return _compiled(constant)


@functools.lru_cache(maxsize=None)  # traced once: the blocks are immutable
def create_whimsy_computation_tensorflow_empty():
    """``( -> <>)``."""

    @tff.tensorflow.computation
    def empty():
        return []

    return _compiled(empty)


def create_whimsy_computation_tensorflow_identity(arg_type=np.float32):
    """``(T -> T)``."""
    return _identity(T.to_type(arg_type))


@functools.lru_cache(maxsize=None)
def _identity(arg_type):
    @tff.tensorflow.computation(arg_type)
    def identity(x):
        return x

    return _compiled(identity)


@functools.lru_cache(maxsize=None)  # traced once: the blocks are immutable
def create_whimsy_computation_tensorflow_random():
    """``( -> float32)``, a fresh normal sample per call."""

    @tff.tensorflow.computation
    def random():
        return tf.random.normal([])

    return _compiled(random)


@functools.lru_cache(maxsize=None)  # traced once: the blocks are immutable
def create_whimsy_computation_tensorflow_tuple():
    """``( -> <a=float32,b=float32,c=float32>)``."""

    @tff.tensorflow.computation
    def tup():
        return Struct([(n, tf.constant(10.0)) for n in ['a', 'b', 'c']])

    return _compiled(tup)


def create_whimsy_computation_tuple():
    """A struct block ``<a=float32,b=float32,c=float32>`` of calls."""
    fn, fn_type = create_whimsy_computation_tensorflow_constant()
    names = ['a', 'b', 'c']
    value = bb.Struct([(n, bb.Call(fn)) for n in names])
    return value, T.StructType([(n, fn_type.result) for n in names])


def create_whimsy_value_at_clients(number_of_clients: int = 3):
    return [float(x) for x in range(10, number_of_clients + 10)], T.type_at_clients(np.float32)


def create_whimsy_value_at_clients_all_equal():
    return 10.0, T.type_at_clients(np.float32, all_equal=True)


def create_whimsy_value_at_server():
    return 10.0, T.type_at_server(np.float32)


def create_whimsy_value_unplaced():
    return 10.0, F32
