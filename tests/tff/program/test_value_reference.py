"""Port of TFF's ``tensorflow_federated/python/program/value_reference_test.py``.

materialize_value over materialized values, value references (tensor and
sequence), a Serializable, attrs, namedtuples, lists, dicts and nested
structures. TFF's program_test_utils classes are written here.
"""

import asyncio
import collections

import attrs
import numpy as np
import pytest
import tensorflow as tf

from simharness.core import types as computation_types
from simharness.core.arrays import Serializable
from simharness.program import value_reference


class _Reference(value_reference.MaterializableValueReference):
    """TFF's TestMaterializableValueReference."""

    def __init__(self, value):
        self._value = value
        if isinstance(value, tf.data.Dataset):
            self._type = computation_types.SequenceType(np.int32)
        else:
            self._type = computation_types.TensorType(np.asarray(value).dtype)

    @property
    def type_signature(self):
        return self._type

    async def get_value(self):
        return self._value


class _Serializable(Serializable):
    def __init__(self, a, b):
        self.a, self.b = a, b

    @classmethod
    def from_bytes(cls, buffer):
        return cls(*buffer)

    def to_bytes(self):
        return bytes([self.a, self.b])

    def __eq__(self, other):
        return isinstance(other, _Serializable) and (self.a, self.b) == (other.a, other.b)


@attrs.define
class _Attrs:
    a: object
    b: object


_NamedTuple = collections.namedtuple('_NamedTuple', ['a', 'b'])


@pytest.mark.parametrize(
    'value,expected',
    [
        (True, True),
        (1, 1),
        ('a', 'a'),
        (np.int32(1), np.int32(1)),
        (_Reference(1), 1),
        (_Serializable(1, 2), _Serializable(1, 2)),
        (_Attrs(_Reference(1), 2), _Attrs(1, 2)),
        (_NamedTuple(_Reference(1), 'x'), _NamedTuple(1, 'x')),
        ([True, _Reference(1), 'a'], [True, 1, 'a']),
        ({'a': _Reference(True), 'b': 1}, {'a': True, 'b': 1}),
        (
            collections.OrderedDict(z=_Reference(2), a=[_Reference(3)]),
            collections.OrderedDict(z=2, a=[3]),
        ),
        ({'x': {'a': _Reference(1)}, 'y': {}}, {'x': {'a': 1}, 'y': {}}),
    ],
    ids=[
        'bool',
        'int',
        'str',
        'numpy_generic',
        'reference_tensor',
        'serializable',
        'attrs',
        'namedtuple',
        'list',
        'dict',
        'ordered_dict',
        'nested',
    ],
)
def test_returns_value(value, expected):
    actual = asyncio.run(value_reference.materialize_value(value))
    assert type(actual) is type(expected)
    assert actual == expected
    if isinstance(actual, collections.OrderedDict):
        assert list(actual) == list(expected)


def test_numpy_array_and_sequence_reference():
    actual = asyncio.run(
        value_reference.materialize_value(
            [np.array([1] * 3, np.int32), _Reference(tf.data.Dataset.from_tensor_slices([1, 2, 3]))]
        )
    )
    np.testing.assert_array_equal(actual[0], [1, 1, 1])
    assert list(actual[1].as_numpy_iterator()) == [1, 2, 3]
