"""Port of TFF's ``tensorflow_federated/python/program/federated_context_test.py``.

All cases: contains_only_server_placed_data (true, false, type errors) and
check_in_federated_context (a FederatedContext installed, another context,
nested).
"""

import collections
from unittest import mock

import numpy as np
import pytest

import simharness as tff
from simharness.core import types as computation_types
from simharness.program import federated_context

_STRUCT_NAMED = computation_types.StructWithPythonType(
    [('a', np.bool_), ('b', np.int32), ('c', np.str_)], collections.OrderedDict
)


@pytest.mark.parametrize(
    'type_signature',
    [
        computation_types.StructWithPythonType([np.bool_, np.int32, np.str_], list),
        _STRUCT_NAMED,
        computation_types.StructWithPythonType(
            [
                (
                    'x',
                    computation_types.StructWithPythonType(
                        [('a', np.bool_), ('b', np.int32)], collections.OrderedDict
                    ),
                ),
                (
                    'y',
                    computation_types.StructWithPythonType(
                        [('c', np.str_)], collections.OrderedDict
                    ),
                ),
            ],
            collections.OrderedDict,
        ),
        computation_types.FederatedType(_STRUCT_NAMED, tff.SERVER),
        computation_types.FederatedType(computation_types.SequenceType(np.int32), tff.SERVER),
        computation_types.FederatedType(np.int32, tff.SERVER),
        computation_types.SequenceType(np.int32),
        computation_types.TensorType(np.int32),
    ],
    ids=[
        'struct_unnamed',
        'struct_named',
        'struct_nested',
        'federated_struct',
        'federated_sequence',
        'federated_tensor',
        'sequence',
        'tensor',
    ],
)
def test_returns_true(type_signature):
    assert federated_context.contains_only_server_placed_data(type_signature)


@pytest.mark.parametrize(
    'type_signature',
    [
        computation_types.FederatedType(np.int32, tff.CLIENTS),
        computation_types.FunctionType(np.int32, np.int32),
        computation_types.PlacementType(),
        computation_types.StructType(
            [('a', computation_types.FederatedType(np.int32, tff.CLIENTS))]
        ),
    ],
    ids=['federated_tensor', 'function', 'placement', 'struct_of_clients'],
)
def test_returns_false(type_signature):
    assert not federated_context.contains_only_server_placed_data(type_signature)


@pytest.mark.parametrize('type_signature', [None, True, 1, 'a', []])
def test_raises_type_error_with_type_signature(type_signature):
    with pytest.raises(TypeError):
        federated_context.contains_only_server_placed_data(type_signature)


def test_does_not_raise_value_error_with_context():
    context = mock.create_autospec(federated_context.FederatedContext, spec_set=True, instance=True)
    with pytest.raises(ValueError):
        federated_context.check_in_federated_context()
    with tff.framework.get_context_stack().install(context):
        federated_context.check_in_federated_context()
    with pytest.raises(ValueError):
        federated_context.check_in_federated_context()


class _TestContext:
    """A sync context that is not a federated one (TFF's TestContext)."""

    def invoke(self, comp, arg):
        return NotImplementedError

    def close(self):
        pass


def test_raises_value_error_with_context():
    with tff.framework.get_context_stack().install(_TestContext()):
        with pytest.raises(ValueError):
            federated_context.check_in_federated_context()


def test_raises_value_error_with_context_nested():
    context = mock.create_autospec(federated_context.FederatedContext, spec_set=True, instance=True)
    with tff.framework.get_context_stack().install(context):
        federated_context.check_in_federated_context()
        with tff.framework.get_context_stack().install(_TestContext()):
            with pytest.raises(ValueError):
                federated_context.check_in_federated_context()
        federated_context.check_in_federated_context()
