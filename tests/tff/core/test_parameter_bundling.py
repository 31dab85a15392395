"""Cases of federated_language's ``computation/computation_wrapper_test.py`` (one struct type
for several Python parameters, ``_parameter_type``) and of its type formatting (a string
tensor prints as ``str``, ``computation_types.py``), on `federated_computation` and
`tensorflow.computation`.

Left out: the wrapper tests that use its private ``test_wrap`` helper for anything
else (the decorators' other cases are covered by tests/unit/test_tracing.py).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as federated_language
import simharness as tff

DECORATORS = [federated_language.federated_computation, tff.tensorflow.computation]


@pytest.mark.parametrize('wrap', DECORATORS, ids=['federated', 'tensorflow'])
def test_unnamed_struct_takes_the_parameter_names(wrap):
    @wrap((np.int32, np.int32))
    def my_fn(x, y):
        """This is my fn."""
        return x

    assert str(my_fn.type_signature) == '(<x=int32,y=int32> -> int32)'
    assert my_fn.type_signature.parameter.container is collections.OrderedDict
    assert my_fn.__doc__ == 'This is my fn.'
    assert my_fn(1, 2) == 1 and my_fn(y=2, x=1) == 1
    wrapped = wrap(lambda x, y: y, [np.int32, np.float32])
    assert str(wrapped.type_signature) == '(<x=int32,y=float32> -> float32)'


@pytest.mark.parametrize('wrap', DECORATORS, ids=['federated', 'tensorflow'])
def test_named_struct_binds_by_name(wrap):
    @wrap([('x', np.int32), ('y', np.int32)])
    def my_fn(x, y):
        return x

    assert str(my_fn.type_signature) == '(<x=int32,y=int32> -> int32)'
    assert my_fn(1, 2) == 1

    @wrap(federated_language.StructType([('y', np.float32), ('x', np.int32)]))
    def swapped(x, y):
        return y  # bound by name: the float32 element

    assert str(swapped.type_signature) == '(<y=float32,x=int32> -> float32)'
    assert swapped(2.5, 1) == np.float32(2.5)


@pytest.mark.parametrize(
    'spec, message',
    [
        ([('x', np.int32), ('y', np.int32)], 'must match field names'),
        ([('x', np.int32), np.int32], 'both named and unnamed'),
        ((np.int32, np.int32, np.int32), '3 elements|2 parameters'),
    ],
)
@pytest.mark.parametrize('wrap', DECORATORS, ids=['federated', 'tensorflow'])
def test_mismatching_struct_is_refused(wrap, spec, message):
    with pytest.raises(TypeError, match=message):
        wrap(lambda x, z: x, spec)


def test_one_parameter_keeps_the_struct_as_given():
    @federated_language.federated_computation([('x', np.int32), ('y', np.int32)])
    def named(arg):
        return arg.x

    assert named(1, 2) == 1
    unnamed = federated_language.federated_computation(lambda arg: arg[0], (np.int32, np.int32))
    assert str(unnamed.type_signature) == '(<int32,int32> -> int32)'


def test_string_tensors_print_as_str():
    assert str(federated_language.TensorType(np.str_)) == 'str'
    assert str(federated_language.to_type(tf.string)) == 'str'
    assert str(federated_language.StructType((np.float64, np.str_))) == '<float64,str>'
    assert str(federated_language.SequenceType(np.str_)) == 'str*'
    assert str(federated_language.TensorType(np.str_, [2])) == 'str[2]'

    @tff.tensorflow.computation(tf.string)
    def length(s):
        return tf.strings.length(s)

    assert str(length.type_signature) == '(str -> int32)'
    assert length('abc') == 3
