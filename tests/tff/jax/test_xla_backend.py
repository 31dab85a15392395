"""Ports of TFF's ``core/environments/xla_backend`` tests (TFF 0.87): ``compiler_test.py``
runs; ``runtime_test.py``, ``xla_serialization_test.py`` and
``xla_executor_bindings_test.py`` are skipped, each case by name, with the reason.

Those three test the internals of TFF's XLA backend: HLO computations built with
``jax.lib.xla_client`` (``XlaBuilder``, ``Shape``, ``ops``), packed into TFF's
``pb.Computation`` protos with parameter and result bindings, run by TFF's Python
``ComputationCallable`` or its C++ XLA executor. JAX has no ``jax.lib.xla_client`` any
more (removed in JAX 0.5), and simharness has none of these: a JAX computation is a
StableHLO module in a TF graph (docs/tff/jax.md), run by any stack's leaf executor.

Changed in ``CompilerTest``: ``_run_comp`` runs the computation with
``tff.framework.ConcreteComputation`` on the default context, not TFF's
``runtime.ComputationCallable`` on a JAX backend; a struct result is the type's container
(an ``OrderedDict``), not TFF's ``Struct``, so its text is compared as the values'.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

pytest.importorskip('jax', reason='the JAX frontend needs JAX: pip install -e ".[jax]"')

import simharness as tff  # noqa: E402
from simharness.core import building_blocks as bb  # noqa: E402
from simharness.jax import compiler  # noqa: E402

computation_types = tff


# ------------------------------------------------------------ CompilerTest


@pytest.fixture
def factory():
    return compiler.XlaComputationFactory()


def _run_comp(comp_pb, comp_type, arg=None):
    assert isinstance(comp_pb, bb.CompiledComputation)
    assert isinstance(comp_type, computation_types.FunctionType)
    comp_callable = tff.framework.ConcreteComputation(comp_pb)
    arg_list = []
    if arg is not None:
        arg_list.append(arg)
    return comp_callable(*arg_list)


def test_create_constant_from_scalar_float32(factory):
    constant_type = computation_types.TensorType(np.float32)
    comp, comp_type = factory.create_constant_from_scalar(10.0, constant_type)
    result = _run_comp(comp, comp_type)
    assert result == 10.0


def test_create_constant_from_scalar_int32x3(factory):
    constant_type = computation_types.TensorType(np.int32, [3])
    comp, comp_type = factory.create_constant_from_scalar(10, constant_type)
    result = _run_comp(comp, comp_type)
    assert isinstance(result, np.ndarray)
    assert result.dtype == np.int32
    assert list(result.shape) == [3]
    assert list(result.flatten()) == [10, 10, 10]


def test_create_constant_from_scalar_int32x3x2(factory):
    constant_type = computation_types.TensorType(np.int32, [3, 2])
    comp, comp_type = factory.create_constant_from_scalar(10, constant_type)
    result = _run_comp(comp, comp_type)
    assert isinstance(result, np.ndarray)
    assert result.dtype == np.int32
    assert list(result.shape) == [3, 2]
    assert list(result.flatten()) == [10, 10, 10, 10, 10, 10]


def test_create_constant_from_scalar_int32_struct(factory):
    constant_type = computation_types.to_type(
        collections.OrderedDict([('a', np.int32), ('b', np.int32)])
    )
    comp, comp_type = factory.create_constant_from_scalar(10, constant_type)
    result = _run_comp(comp, comp_type)
    assert result == collections.OrderedDict(a=10, b=10)  # TFF: str(result) == '<a=10,b=10>'


def test_create_constant_from_scalar_float32_nested_struct(factory):
    constant_type = computation_types.to_type(
        collections.OrderedDict(
            [
                ('a', np.float32),
                ('b', collections.OrderedDict([('c', np.float32)])),
            ]
        )
    )
    comp, comp_type = factory.create_constant_from_scalar(10, constant_type)
    result = _run_comp(comp, comp_type)
    # TFF: str(result) == '<a=10.0,b=<c=10.0>>'
    assert result == collections.OrderedDict(a=10.0, b=collections.OrderedDict(c=10.0))
    assert result['a'].dtype == np.float32


def test_create_constant_refuses_a_type_of_more_than_tensors(factory):
    with pytest.raises(ValueError, match='Not a tensor or a structure of tensors'):
        factory.create_constant_from_scalar(
            1, computation_types.FederatedType(np.int32, tff.CLIENTS)
        )


# ------------------------------------------------------------ the internals we do not have

_XLA_CLIENT = (
    "TFF's XLA backend internals, built on jax.lib.xla_client (removed from JAX); "
    'simharness runs JAX computations as StableHLO in TF graphs (docs/tff/jax.md)'
)

_SKIPPED = {
    'runtime_test': [
        'test_normalize_tensor_representation_int32',
        'test_normalize_tensor_representation_int32x2x3',
        'test_computation_callable_return_one_number',
        'test_computation_callable_add_two_numbers',
    ],
    'xla_serialization_test': [
        'test_pack_xla_computation',
        'test_pack_unpack_xla_computation_roundtrip',
        'test_create_xla_tff_computation_noarg',
        'test_create_xla_tff_computation_raises_missing_arg_in_xla',
        'test_create_xla_tff_computation_raises_missing_arg_in_type_spec',
        'test_create_xla_tff_computation_raises_arg_type_mismatch',
        'test_create_xla_tff_computation_raises_result_type_mismatch',
        'test_create_xla_tff_computation_int32x10_to_int32x10',
        'test_create_xla_tff_computation_with_reordered_tensor_indexes',
        'test_flatten_xla_tensor_shape',
        'test_flatten_xla_tuple_shape',
        'test_xla_shapes_and_binding_to_tff_type_with_tensor',
        'test_xla_shapes_and_binding_to_tff_type_with_tuple',
        'test_xla_shapes_and_binding_to_tff_type_raises_unused_tensor',
        'test_xla_shapes_and_binding_to_tff_type_raises_unused_element',
        'test_xla_computation_and_bindings_to_tff_type_none_binding_to_int32',
        'test_xla_computation_and_bindings_to_tff_type_noarg_to_int32',
        'test_xla_computation_and_bindings_to_tff_type_empty_tuple_to_int32',
        'test_xla_computation_and_bindings_to_tff_type_int32_tuple_to_int32',
        'test_xla_computation_and_bindings_to_tff_type_raises_noarg',
        'test_xla_computation_and_bindings_to_tff_type_raises_unused_element',
    ],
    'xla_executor_bindings_test': ['test_create', 'test_materialize_on_unkown_fails'],
}

_REASONS = {
    'runtime_test': _XLA_CLIENT + " (TFF's runtime.ComputationCallable and its helpers)",
    'xla_serialization_test': _XLA_CLIENT + " (HLO packed into TFF's pb.Computation)",
    'xla_executor_bindings_test': "TFF's C++ XLA executor bindings (no C++ executors here)",
}


@pytest.mark.parametrize('module, case', [(m, c) for m, cases in _SKIPPED.items() for c in cases])
def test_tff_xla_backend_internals(module, case):
    pytest.skip(f'{module}.{case}: {_REASONS[module]}')
