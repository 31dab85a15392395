"""Port of TFF's ``core/environments/jax_frontend/jax_computation_test.py`` (TFF 0.87),
with the parameter types federated_language_jax and simharness also take
(`jax.ShapeDtypeStruct`s).

Changed: ``test_raises_raises_value_error_with_dtype`` is an ``async def`` in TFF, which
absltest never awaits (its body never ran); here it runs.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

jax = pytest.importorskip('jax', reason='the JAX frontend needs JAX: pip install -e ".[jax]"')
ml_dtypes = pytest.importorskip('ml_dtypes')

import simharness as tff  # noqa: E402
from simharness.core import computation as computation_impl  # noqa: E402
from simharness.core import computation as polymorphic_computation  # noqa: E402
from simharness.jax import jax_computation  # noqa: E402

computation_types = tff


def test_returns_concrete_computation_with_no_arg():
    @jax_computation.jax_computation()
    def _comp():
        return 1

    assert isinstance(_comp, computation_impl.ConcreteComputation)
    expected_type = computation_types.FunctionType(None, np.int32)
    assert _comp.type_signature == expected_type


def test_returns_concrete_computation_with_one_arg():
    @jax_computation.jax_computation(np.int32)
    def _comp(x):
        return jax.numpy.add(x, 1)

    assert isinstance(_comp, computation_impl.ConcreteComputation)
    expected_type = computation_types.FunctionType(np.int32, np.int32)
    assert _comp.type_signature == expected_type


def test_returns_concrete_computation_with_two_args():
    @jax_computation.jax_computation(np.int32, np.int32)
    def _comp(x, y):
        return jax.numpy.add(x, y)

    assert isinstance(_comp, computation_impl.ConcreteComputation)
    expected_type = computation_types.FunctionType(
        computation_types.StructWithPythonType(
            [('x', np.int32), ('y', np.int32)], collections.OrderedDict
        ),
        np.int32,
    )
    assert _comp.type_signature == expected_type


def test_returns_concrete_computation_with_correct_arg_order():
    @jax_computation.jax_computation(computation_types.TensorType(np.int32, (10,)), np.int32)
    def _comp(y, x):
        return jax.numpy.add(x, jax.numpy.sum(y))

    assert isinstance(_comp, computation_impl.ConcreteComputation)
    expected_type = computation_types.FunctionType(
        computation_types.StructWithPythonType(
            [
                ('y', computation_types.TensorType(np.int32, (10,))),
                ('x', np.int32),
            ],
            collections.OrderedDict,
        ),
        np.int32,
    )
    assert _comp.type_signature == expected_type


@pytest.mark.parametrize(
    'type_spec',
    [
        pytest.param(computation_types.TensorType(np.bool_), id='bool'),
        pytest.param(computation_types.TensorType(np.int8), id='int8'),
        pytest.param(computation_types.TensorType(np.int16), id='int16'),
        pytest.param(computation_types.TensorType(np.int32), id='int32'),
        pytest.param(computation_types.TensorType(np.uint8), id='uint8'),
        pytest.param(computation_types.TensorType(np.uint16), id='uint16'),
        pytest.param(computation_types.TensorType(np.uint32), id='uint32'),
        pytest.param(computation_types.TensorType(np.float16), id='float16'),
        pytest.param(computation_types.TensorType(np.float32), id='float32'),
        pytest.param(computation_types.TensorType(np.complex64), id='complex64'),
        pytest.param(computation_types.TensorType(ml_dtypes.bfloat16), id='bfloat16'),
        pytest.param(computation_types.TensorType(np.int32), id='generic'),
        pytest.param(computation_types.TensorType(np.int32, shape=[3]), id='array'),
    ],
)
def test_returns_concrete_computation_with_dtype(type_spec):
    @jax_computation.jax_computation(type_spec)
    def _comp(x):
        return x

    assert isinstance(_comp, computation_impl.ConcreteComputation)
    expected_type = computation_types.FunctionType(type_spec, type_spec)
    assert _comp.type_signature == expected_type


@pytest.fixture
def enable_x64():
    jax.config.update('jax_enable_x64', True)
    try:
        yield
    finally:
        jax.config.update('jax_enable_x64', False)


@pytest.mark.parametrize(
    'type_spec',
    [
        pytest.param(computation_types.TensorType(np.int64), id='int64'),
        pytest.param(computation_types.TensorType(np.uint64), id='uint64'),
        pytest.param(computation_types.TensorType(np.float64), id='float64'),
        pytest.param(computation_types.TensorType(np.complex128), id='complex128'),
    ],
)
def test_returns_concrete_computation_with_dtype_and_enable_x64(type_spec, enable_x64):
    @jax_computation.jax_computation(type_spec)
    def _comp(x):
        return x

    assert isinstance(_comp, computation_impl.ConcreteComputation)
    expected_type = computation_types.FunctionType(type_spec, type_spec)
    assert _comp.type_signature == expected_type


@pytest.mark.parametrize(
    'type_spec',
    [
        pytest.param(computation_types.TensorType(np.int64), id='int64'),
        pytest.param(computation_types.TensorType(np.uint64), id='uint64'),
        pytest.param(computation_types.TensorType(np.float64), id='float64'),
        pytest.param(computation_types.TensorType(np.complex128), id='complex128'),
        pytest.param(computation_types.TensorType(np.str_), id='str'),
    ],
)
def test_raises_raises_value_error_with_dtype(type_spec):
    with pytest.raises(ValueError):

        @jax_computation.jax_computation(type_spec)
        def _comp(x):
            return x, x


def test_returns_polymorphic_computation():
    @jax_computation.jax_computation()
    def _comp(x):
        return jax.numpy.add(x, 1)

    assert isinstance(_comp, polymorphic_computation.PolymorphicComputation)


# ------------------------------------------------------------ beyond TFF's cases


def test_tff_jax_computation_is_the_decorator():
    assert tff.jax.computation is jax_computation.jax_computation


def test_shape_dtype_structs_are_parameter_types():
    @tff.jax.computation(
        jax.ShapeDtypeStruct((2, 3), np.float32),
        collections.OrderedDict(b=jax.ShapeDtypeStruct((), np.int32)),
    )
    def _comp(x, y):
        return jax.numpy.sum(x) + y['b']

    assert str(_comp.type_signature) == '(<x=float32[2,3],y=<b=int32>> -> float32)'
    assert _comp(np.ones((2, 3), np.float32), collections.OrderedDict(b=4)) == 10.0


def test_polymorphic_computation_is_traced_per_argument_type():
    @tff.jax.computation
    def _double(x):
        return x * 2

    assert _double(np.int32(3)) == 6
    np.testing.assert_array_equal(_double(np.ones(2, np.float32)), [2.0, 2.0])
    assert str(_double.concrete(computation_types.TensorType(np.float32, (2,))).type_signature) == (
        '(float32[2] -> float32[2])'
    )


def test_results_keep_their_containers():
    Point = collections.namedtuple('Point', ['x', 'y'])

    @tff.jax.computation(np.float32)
    def _comp(a):
        return Point(a, a + 1), [a * 2]

    assert str(_comp.type_signature) == '(float32 -> <<x=float32,y=float32>,<float32>>)'
    point, listed = _comp(np.float32(1))
    assert point == Point(1.0, 2.0) and list(listed) == [2.0]


@pytest.mark.parametrize(
    'type_spec',
    [
        pytest.param(computation_types.SequenceType(np.int32), id='sequence'),
        pytest.param(computation_types.FederatedType(np.int32, tff.CLIENTS), id='federated'),
    ],
)
def test_parameters_other_than_tensors_and_structs_are_refused(type_spec):
    with pytest.raises(TypeError, match='exclusively structure and tensor types'):

        @tff.jax.computation(type_spec)
        def _comp(x):
            return x


def test_a_polymorphic_computation_takes_its_type_from_a_federated_map():
    @tff.jax.computation
    def _square(x):
        return x * x

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def _squares(xs):
        return tff.federated_map(_square, xs)

    assert str(_squares.type_signature) == '({float32}@CLIENTS -> {float32}@CLIENTS)'
    assert _squares([np.float32(2), np.float32(3)]) == [4.0, 9.0]
