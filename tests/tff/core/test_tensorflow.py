"""Port of TFF's ``core/environments/tensorflow_frontend/tensorflow_types_test.py`` and of the
``TypeToTfTensorSpecsTest`` and ``StructureFromTensorTypeTreeTest`` cases of
``tensorflow_backend/type_conversions_test.py``, for ``simharness.tensorflow``.

Left out: ``TensorflowInferTypeTest`` and ``TypeToTfDtypesAndShapesTest`` /
``TypeToTfStructureTest`` (private helpers that ``tff.tensorflow`` does not export),
``to_type``'s delegation test (it mocks ``federated_language.to_type``). Added:
``transform_args`` / ``transform_result`` and ``computation`` being the
``tf_computation`` decorator.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as federated_language
import simharness as tff


@pytest.mark.parametrize(
    'obj, expected',
    [
        (tf.int32, federated_language.TensorType(np.int32)),
        (
            [tf.int32],
            federated_language.StructWithPythonType(
                [federated_language.TensorType(np.int32)], list
            ),
        ),
        (
            [tf.int32, np.float32],
            federated_language.StructWithPythonType(
                [
                    federated_language.TensorType(np.int32),
                    federated_language.TensorType(np.float32),
                ],
                list,
            ),
        ),
        ((tf.int32, tf.TensorShape([2, 3])), federated_language.TensorType(np.int32, shape=[2, 3])),
        (
            (tf.int32, tf.TensorShape([2, None])),
            federated_language.TensorType(np.int32, shape=[2, None]),
        ),
        ((tf.int32, tf.TensorShape(None)), federated_language.TensorType(np.int32, shape=None)),
        ((tf.int32, tf.TensorShape([])), federated_language.TensorType(np.int32)),
        ((tf.int32, [2, 3]), federated_language.TensorType(np.int32, shape=[2, 3])),
        ((np.int32, tf.TensorShape([2, 3])), federated_language.TensorType(np.int32, shape=[2, 3])),
        (
            [(tf.int32, tf.TensorShape([2, 3]))],
            federated_language.StructWithPythonType(
                [federated_language.TensorType(np.int32, shape=[2, 3])], list
            ),
        ),
        (
            [(tf.int32, tf.TensorShape([2, 3])), np.float32],
            federated_language.StructWithPythonType(
                [
                    federated_language.TensorType(np.int32, shape=[2, 3]),
                    federated_language.TensorType(np.float32),
                ],
                list,
            ),
        ),
        (
            tf.TensorSpec(shape=[2, 3], dtype=tf.int32),
            federated_language.TensorType(np.int32, shape=[2, 3]),
        ),
        (
            [tf.TensorSpec(shape=[2, 3], dtype=tf.int32)],
            federated_language.StructWithPythonType(
                [federated_language.TensorType(np.int32, shape=[2, 3])], list
            ),
        ),
        (
            [tf.TensorSpec(shape=[2, 3], dtype=tf.int32), np.float32],
            federated_language.StructWithPythonType(
                [
                    federated_language.TensorType(np.int32, shape=[2, 3]),
                    federated_language.TensorType(np.float32),
                ],
                list,
            ),
        ),
        (
            tf.data.DatasetSpec(tf.TensorSpec(shape=[2, 3], dtype=tf.int32)),
            federated_language.SequenceType(federated_language.TensorType(np.int32, shape=[2, 3])),
        ),
        (
            [tf.data.DatasetSpec(tf.TensorSpec(shape=[2, 3], dtype=tf.int32))],
            federated_language.StructWithPythonType(
                [federated_language.SequenceType(federated_language.TensorType(np.int32, [2, 3]))],
                list,
            ),
        ),
    ],
    ids=[
        'dtype',
        'dtype_nested',
        'dtype_mixed',
        'tensor_like_shape_fully_defined',
        'tensor_like_shape_partially_defined',
        'tensor_like_shape_unknown',
        'tensor_like_shape_scalar',
        'tensor_like_dtype_only',
        'tensor_like_shape_only',
        'tensor_like_nested',
        'tensor_like_mixed',
        'tensor_spec',
        'tensor_spec_nested',
        'tensor_spec_mixed',
        'dataset_spec',
        'dataset_spec_nested',
    ],
)
def test_to_type(obj, expected):
    actual = tff.tensorflow.to_type(obj)
    assert actual == expected
    if isinstance(expected, federated_language.StructType):
        assert actual.python_container is expected.python_container


def test_type_to_tf_tensor_specs():
    assert tff.tensorflow.type_to_tf_tensor_specs(
        federated_language.TensorType(np.int32)
    ) == tf.TensorSpec([], np.int32)
    assert tff.tensorflow.type_to_tf_tensor_specs(
        federated_language.TensorType(np.int32, [10])
    ) == tf.TensorSpec([10], np.int32)
    triple = federated_language.StructWithPythonType(
        [
            ('a', federated_language.TensorType(np.int32, [5])),
            ('b', federated_language.TensorType(np.bool_)),
            ('c', federated_language.TensorType(np.float32, [3])),
        ],
        collections.OrderedDict,
    )
    assert tff.tensorflow.type_to_tf_tensor_specs(triple) == {
        'a': tf.TensorSpec([5], np.int32),
        'b': tf.TensorSpec([], np.bool_),
        'c': tf.TensorSpec([3], np.float32),
    }
    two_level = federated_language.StructWithPythonType(
        [
            ('a', np.bool_),
            (
                'b',
                federated_language.StructWithPythonType(
                    [
                        ('c', federated_language.TensorType(np.float32)),
                        ('d', federated_language.TensorType(np.int32, [20])),
                    ],
                    collections.OrderedDict,
                ),
            ),
            ('e', federated_language.StructType([])),
        ],
        collections.OrderedDict,
    )
    assert tff.tensorflow.type_to_tf_tensor_specs(two_level) == {
        'a': tf.TensorSpec([], np.bool_),
        'b': {'c': tf.TensorSpec([], np.float32), 'd': tf.TensorSpec([20], np.int32)},
        'e': (),
    }
    assert tff.tensorflow.type_to_tf_tensor_specs(federated_language.StructType([np.int32])) == (
        tf.TensorSpec([], np.int32),
    )
    with pytest.raises(TypeError):
        tff.tensorflow.type_to_tf_tensor_specs(np.float32(0.0))


def _incrementing():
    i = -1

    def fn(_):
        nonlocal i
        i += 1
        return i

    return fn


def test_structure_from_tensor_type_tree():
    def expect_int32_return_5(tensor_type):
        assert tensor_type == federated_language.TensorType(np.int32)
        return 5

    assert tff.tensorflow.structure_from_tensor_type_tree(expect_int32_return_5, np.int32) == 5
    struct_type = federated_language.StructWithPythonType(
        [('a', np.int32), ('b', np.int32)], collections.OrderedDict
    )
    assert tff.tensorflow.structure_from_tensor_type_tree(
        _incrementing(), struct_type
    ) == collections.OrderedDict(a=0, b=1)
    assert tff.tensorflow.structure_from_tensor_type_tree(
        _incrementing(), [np.int32, (np.str_, np.int32)]
    ) == [0, (1, 2)]
    assert tff.tensorflow.structure_from_tensor_type_tree(
        lambda _: set(), [np.int32, (np.str_, np.int32)]
    ) == [set(), (set(), set())]


def test_transform_args_and_result():
    value = collections.OrderedDict(
        t=tf.constant([1, 2]),
        v=tf.Variable(3.0),
        d=tf.data.Dataset.range(3),
        nested=[np.int32(4), (tf.constant(True),)],
    )
    out = tff.tensorflow.transform_args(value)
    np.testing.assert_array_equal(out['t'], [1, 2])
    assert isinstance(out['t'], np.ndarray) and out['v'] == np.float32(3.0)
    assert out['d'] == [0, 1, 2]
    assert out['nested'][0] == 4 and out['nested'][1][0] is np.True_
    assert tff.tensorflow.transform_result([tf.constant(1.5)])[0] == np.float32(1.5)
    kept = tff.tensorflow.eager_values_to_numpy(value)  # what the contexts apply
    assert isinstance(kept['d'], tf.data.Dataset) and isinstance(kept['t'], np.ndarray)


def test_computation_is_the_tf_computation_decorator():
    assert tff.tensorflow.computation is tff.tf_computation

    @tff.tensorflow.computation(tff.tensorflow.to_type((tf.int32, tf.TensorShape([2]))))
    def double(x):
        return x * 2

    assert str(double.type_signature) == '(int32[2] -> int32[2])'
    np.testing.assert_array_equal(double(np.array([1, 2], np.int32)), [2, 4])
