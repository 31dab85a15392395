"""Port of TFF's ``tensorflow_federated/python/aggregators/primitives_test.py``.

``FederatedSampleTest``: all cases. ``SecureQuantizedSumTest``: the end-to-end
cases (Python and federated bounds, scalar/tensor/composite values, int and
float types, out-of-range clipping, non-zero lower bounds, the argument
errors). Left out: the tests of TFF's private shift helpers
(``_client_tensor_shift_for_secure_sum`` etc.; their behaviour is checked end
to end) and ``SecureQuantizedSumStaticAssertsTest`` (inspects TFF's compiled
building blocks).
"""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import primitives
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

F32_C = tff.FederatedType(np.float32, tff.CLIENTS)


def _sampler(member=np.float32, max_num_samples=100):
    return tff.federated_computation(
        lambda v: primitives.federated_sample(v, max_num_samples),
        tff.FederatedType(member, tff.CLIENTS),
    )


def test_federated_sample_single_value_and_nested(tff_stack):
    assert sorted(_sampler()([1.0, 2.0, 5.0])) == [1.0, 2.0, 5.0]
    nested = collections.namedtuple('NestedScalars', ['x', 'y'])
    result = _sampler(collections.OrderedDict(x=np.float32, y=np.float32))(
        [nested(0.0, 1.0), nested(-1.0, 5.0), nested(2.0, -10.0)]
    )
    i0, i1 = list(result['x']).index(0.0), list(result['y']).index(5.0)
    assert result['y'][i0] == 1.0 and result['x'][i1] == -1.0  # shuffled in unison


def test_federated_sample_wrong_placement():
    with pytest.raises(TypeError, match='argument must be a federated value placed at CLIENTS'):
        tff.federated_computation(
            lambda v: primitives.federated_sample(v), tff.FederatedType(np.bool_, tff.SERVER)
        )


@pytest.mark.parametrize('other', [0.0, np.nan, np.inf], ids=['zero', 'nan', 'inf'])
def test_federated_sample_max_size_and_proportions(other):
    value = _sampler()([1.0] * 100 + [other] * 100)
    assert len(value) == 100
    assert abs(np.sum(value == 1.0) - 50) <= 20


def test_federated_sample_nested_named_tuples():
    member = collections.OrderedDict(
        tuple_1=collections.OrderedDict(x=np.float32, y=np.float32),
        tuple_2=collections.OrderedDict(a=np.float32, b=np.float32),
    )
    od = collections.OrderedDict
    result = _sampler(member)(
        [
            od(tuple_1=od(x=0.0, y=5.0), tuple_2=od(a=1.0, b=2.0)),
            od(tuple_1=od(x=3.4, y=5.6), tuple_2=od(a=0.5, b=0.5)),
        ]
    )
    assert 5.0 in result['tuple_1']['y'] and 1.0 in result['tuple_2']['a']


def _quantized_sum(member, bounds_at_server=False, lower=None, upper=None):
    if bounds_at_server:
        bound_t = tff.TensorType(np.asarray(lower).dtype)

        @tff.federated_computation(
            tff.FederatedType(member, tff.CLIENTS),
            tff.FederatedType(bound_t, tff.SERVER),
            tff.FederatedType(bound_t, tff.SERVER),
        )
        def comp(value, lo, up):
            return primitives.secure_quantized_sum(value, lo, up)

        return comp
    return tff.federated_computation(
        lambda value: primitives.secure_quantized_sum(value, lower, upper),
        tff.FederatedType(member, tff.CLIENTS),
    )


@pytest.mark.parametrize('int_type', [np.int32, np.int64])
def test_int_types_py_and_tff_ranges(tff_stack, int_type):
    lo, up = int_type(0), int_type(255)
    assert _quantized_sum(int_type, lower=lo, upper=up)([0, 10, 20, 300]) == 285
    tensor = tff.TensorType(int_type, [2])
    assert_all_close(
        _quantized_sum(tensor, lower=lo, upper=up)([[0, 0], [1, 2], [300, -1]]), [256, 2]
    )
    composite = (int_type, (int_type, [2]))
    assert_all_close(
        _quantized_sum(composite, True, np.array(0, int_type), np.array(255, int_type))(
            [(1, [2, 3]), (300, [4, 5])], np.array(0, int_type), np.array(255, int_type)
        ),
        (256, [6, 8]),
    )
    assert (
        _quantized_sum(int_type, lower=int_type(-20), upper=int_type(20))([-30, -5, 10, 50])
        == -20 - 5 + 10 + 20
    )


@pytest.mark.parametrize('float_type', [np.float32, np.float64])
def test_float_types(tff_stack, float_type):
    lo, up = float_type(0.0), float_type(1.0)
    assert_all_close(
        _quantized_sum(float_type, lower=lo, upper=up)([0.0, 0.5, 0.25, 2.0]), 1.75, atol=1e-6
    )
    composite = collections.OrderedDict(a=float_type, b=(float_type, [2]))
    assert_all_close(
        _quantized_sum(composite, lower=lo, upper=up)(
            [
                collections.OrderedDict(a=0.5, b=[0.25, -1.0]),
                collections.OrderedDict(a=0.25, b=[1.5, 0.5]),
            ]
        ),
        collections.OrderedDict(a=0.75, b=[1.25, 0.5]),
        atol=1e-6,
    )
    assert_all_close(
        _quantized_sum(float_type, lower=float_type(-2.0), upper=float_type(3.0))([-3.0, 1.0, 2.5]),
        -2.0 + 1.0 + 2.5,
        atol=1e-5,
    )


def test_argument_errors():
    with pytest.raises(primitives.UnsupportedDTypeError):
        _quantized_sum(np.int16, lower=np.int16(0), upper=np.int16(1))
    with pytest.raises(primitives.ScalarBoundSimpleValueDTypeError):
        _quantized_sum(np.int32, lower=np.float32(0.0), upper=np.float32(1.0))
    with pytest.raises(primitives.ScalarBoundStructValueDTypeError):
        _quantized_sum((np.int32, np.float32), lower=np.int32(0), upper=np.int32(1))
    with pytest.raises(primitives.StructuredBoundsTypeMismatchError):
        _quantized_sum(
            (np.int32, np.int32),
            lower=(np.int32(0), np.float32(1.0)),
            upper=(np.int32(0), np.float32(1.0)),
        )

    with pytest.raises(primitives.BoundsDifferentTypesError):

        @tff.federated_computation(
            tff.FederatedType(np.int32, tff.CLIENTS), tff.FederatedType(np.int32, tff.SERVER)
        )
        def mixed(value, upper):
            return primitives.secure_quantized_sum(value, np.int32(0), upper)

    with pytest.raises(primitives.BoundsNotPlacedAtServerError):

        @tff.federated_computation(
            tff.FederatedType(np.int32, tff.CLIENTS),
            tff.FederatedType(np.int32, tff.CLIENTS, all_equal=True),
        )
        def at_clients(value, bound):
            return primitives.secure_quantized_sum(value, bound, bound)

    for cls in (primitives.UnsupportedDTypeError, primitives.BoundsDifferentTypesError):
        assert issubclass(cls, TypeError)
