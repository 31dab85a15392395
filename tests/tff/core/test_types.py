"""Port of federated-language's ``types/array_shape_test.py`` and ``types/dtype_utils_test.py``
(the helpers ``import simharness as federated_language`` exports at the top level), with
the type names programs construct (`StructWithPythonType`, `AbstractType`).

Left out: the ``from_proto`` / ``to_proto`` cases (simharness has no
federated_language protos); ``infer_dtype``'s NotImplementedError cases for
None and object() are kept.
"""

from __future__ import annotations

import collections

import ml_dtypes
import numpy as np
import pytest

import simharness as federated_language


@pytest.mark.parametrize('shape', [(2, 3), ()])
def test_is_shape_fully_defined_true(shape):
    assert federated_language.array_shape_is_fully_defined(shape)


@pytest.mark.parametrize('shape', [(2, None), None])
def test_is_shape_fully_defined_false(shape):
    assert not federated_language.array_shape_is_fully_defined(shape)


def test_is_shape_scalar():
    assert federated_language.array_shape_is_scalar(())
    for shape in [(2, 3), (2, None), None]:
        assert not federated_language.array_shape_is_scalar(shape)


@pytest.mark.parametrize(
    'target, other',
    [
        ((2, 3), (2, 3)),
        ((2, 3), (2, None)),
        ((2, 3), (None, None)),
        ((2, 3), None),
        ((2, None), (2, 3)),
        ((2, None), (2, None)),
        ((2, None), (None, None)),
        ((2, None), None),
        ((None, None), (2, 3)),
        ((None, None), (2, None)),
        ((None, None), (None, None)),
        ((None, None), None),
        (None, (2, 3)),
        (None, (2, None)),
        (None, (None, None)),
        (None, None),
        (None, ()),
        ((), None),
        ((), ()),
    ],
)
def test_is_compatible_with_true(target, other):
    assert federated_language.array_shape_is_compatible_with(target, other)


@pytest.mark.parametrize(
    'target, other',
    [
        ((2, 3), ()),
        ((2, 3), (20, 3)),
        ((2, None), ()),
        ((2, None), (20, None)),
        ((None, None), ()),
        ((), (2, 3)),
        ((), (2, None)),
        ((), (None, None)),
    ],
)
def test_is_compatible_with_false(target, other):
    assert not federated_language.array_shape_is_compatible_with(target, other)


@pytest.mark.parametrize('shape, expected', [((2, 3), 6), ((2, None), None), (None, None), ((), 1)])
def test_num_elements_in_shape(shape, expected):
    assert federated_language.num_elements_in_array_shape(shape) == expected


@pytest.mark.parametrize(
    'dtype',
    [
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
        ml_dtypes.bfloat16,
        np.str_,
    ],
)
def test_is_valid_dtype_true(dtype):
    assert federated_language.is_valid_dtype(dtype)


@pytest.mark.parametrize('dtype', [np.bytes_, np.object_])
def test_is_valid_dtype_false(dtype):
    assert not federated_language.is_valid_dtype(dtype)


@pytest.mark.parametrize(
    'value, dtype',
    [
        (True, np.bool_),
        (1, np.int8),
        (1, np.int16),
        (1, np.int32),
        (1, np.int64),
        (1, np.uint8),
        (1, np.uint16),
        (1, np.uint32),
        (1, np.uint64),
        (1.0, np.float16),
        (1.0, np.float32),
        (1.0, np.float64),
        (complex(1.0, 1.0), np.complex64),
        (complex(1.0, 1.0), np.complex128),
        ('a', np.str_),
        (b'a', np.bytes_),
    ],
)
def test_can_cast_true(value, dtype):
    assert federated_language.can_cast_dtype(value, dtype)


@pytest.mark.parametrize(
    'value, dtype',
    [
        (np.iinfo(np.int64).max, np.int32),
        (float(np.finfo(np.float64).max), np.float32),
        (complex(np.finfo(np.float64).max, 1), np.complex64),
    ],
)
def test_can_cast_false(value, dtype):
    assert not federated_language.can_cast_dtype(value, dtype)


@pytest.mark.parametrize(
    'obj, expected',
    [
        (True, np.bool_),
        (1, np.int32),
        (int(np.iinfo(np.int32).min), np.int32),
        (int(np.iinfo(np.int32).max), np.int32),
        (int(np.iinfo(np.int64).min), np.int64),
        (int(np.iinfo(np.int64).max), np.int64),
        (1.0, np.float32),
        (complex(1.0, 1.0), np.complex128),
        ('a', np.str_),
        (b'a', np.str_),
    ],
)
def test_infer_dtype(obj, expected):
    assert federated_language.infer_dtype(obj) == expected


@pytest.mark.parametrize('obj', [int(np.iinfo(np.int64).min) - 1, int(np.iinfo(np.int64).max) + 1])
def test_infer_dtype_raises_value_error(obj):
    with pytest.raises(ValueError):
        federated_language.infer_dtype(obj)


@pytest.mark.parametrize('obj', [None, object()])
def test_infer_dtype_raises_not_implemented(obj):
    with pytest.raises(NotImplementedError):
        federated_language.infer_dtype(obj)


def test_array_is_compatible_dtype_and_shape():
    assert federated_language.array_is_compatible_dtype(np.int32(1), np.int32)
    assert federated_language.array_is_compatible_dtype(1, np.int64)
    assert not federated_language.array_is_compatible_dtype(1.0, np.int32)
    assert not federated_language.array_is_compatible_dtype(np.array([1], np.int64), np.int32)
    assert federated_language.array_is_compatible_dtype('a', np.str_)
    assert federated_language.array_is_compatible_shape(np.zeros([2, 3]), (2, None))
    assert federated_language.array_is_compatible_shape(1.0, ())
    assert not federated_language.array_is_compatible_shape(np.zeros([2]), ())


def test_struct_with_python_type_and_abstract_type():
    t = federated_language.StructWithPythonType(
        [('a', np.int32), ('b', np.float32)], collections.OrderedDict
    )
    assert t.python_container is collections.OrderedDict
    assert str(t) == '<a=int32,b=float32>'
    with pytest.raises(TypeError):
        federated_language.StructWithPythonType([np.int32], 'list')
    t_abstract = federated_language.AbstractType('T')
    assert str(t_abstract) == 'T' and t_abstract == federated_language.AbstractType('T')
    with pytest.raises(TypeError):
        t_abstract.is_assignable_from(federated_language.TensorType(np.int32))
    assert isinstance(
        federated_language.federated_computation(lambda: 1), federated_language.Computation
    )


def test_federated_language_framework_names_a_program_uses():
    # `federated_language.framework.Computation` (TFF's analytics annotate with it), the
    # building block `Struct`, and the structure checks of TFF's aggregators.
    import simharness as federated_language
    from simharness.core import building_blocks, computation

    fw = federated_language.framework
    assert fw.Computation is computation.Computation is federated_language.Computation
    assert fw.ConcreteComputation is computation.ConcreteComputation
    assert fw.Struct is building_blocks.Struct
    assert isinstance(federated_language.tensorflow.computation(lambda: 1), fw.Computation)
    f32 = federated_language.to_type(np.float32)
    mixed = federated_language.to_type([np.float32, np.int32])
    assert fw.is_structure_of_floats(f32) and not fw.is_structure_of_floats(mixed)
    assert fw.is_structure_of_integers(federated_language.to_type(np.int64))
    assert fw.is_structure_of_tensors(mixed)
    assert fw.infer_type(np.int32(3)) == federated_language.TensorType(np.int32)
    assert fw.PlacementLiteral is type(federated_language.CLIENTS)


def test_tff_types_holds_tffs_type_classes_by_that_path():
    # TFF 0.88's ``tff.types`` (its tests and the simple_fedavg example write
    # ``tff.types.SequenceType(...)``): the same classes as the top-level names.
    import simharness as tff

    for name in (
        'AbstractType',
        'FederatedType',
        'FunctionType',
        'PlacementType',
        'SequenceType',
        'StructType',
        'StructWithPythonType',
        'TensorType',
        'Type',
        'to_type',
        'ArrayShape',
    ):
        assert getattr(tff.types, name) is getattr(tff, name), name
    assert tff.types.SequenceType(tff.types.TensorType(np.int32, [None])) == tff.SequenceType(
        tff.TensorType(np.int32, [None])
    )
    assert tff.types.is_structure_of_floats(tff.to_type(np.float32))
    assert tff.types.is_structure_of_integers(tff.to_type(np.int32))
    assert tff.types.is_structure_of_tensors(tff.to_type([np.float32, np.int32]))


def test_tff_types_tensorflow_to_type_converts_tf_specs():
    # TFF 0.68-0.88's ``tff.types.tensorflow_to_type`` (TFF ≤0.80's tutorial on TFF
    # optimizers calls it on a model's ``input_spec``); the examples of its docstring.
    import tensorflow as tf

    import simharness as tff

    to_type = tff.types.tensorflow_to_type
    assert to_type(tf.int32) == tff.TensorType(np.int32)
    assert to_type((tf.int32, tf.TensorShape([2, 3]))) == tff.TensorType(np.int32, (2, 3))
    assert to_type(tf.TensorSpec([2, 3], tf.int32)) == tff.TensorType(np.int32, (2, 3))
    spec = tf.data.DatasetSpec(tf.TensorSpec([2, 3], dtype=tf.int32))
    assert to_type(spec) == tff.SequenceType(tff.TensorType(np.int32, (2, 3)))
    input_spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
    assert str(to_type(input_spec)) == '<float32[?,28,28,1],int32[?]>'
    assert to_type(input_spec) == tff.tensorflow.to_type(input_spec)
