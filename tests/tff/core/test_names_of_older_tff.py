"""Names TFF had up to 0.60-0.68 that published programs of that time still call.

`Type.is_tensor()` and its siblings (TFF up to 0.60), `tff.types.type_from_tensors`
(up to 0.64), `tff.types.at_clients` / `at_server` (up to 0.66), `tff.aggregators.federated_min` /
`federated_max` (up to 0.68), `tff.learning.Model` (0.48-0.52: `models.VariableModel`).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

KINDS = ['abstract', 'federated', 'function', 'placement', 'sequence', 'struct', 'tensor']


@pytest.mark.parametrize(
    'type_, kind',
    [
        (tff.types.AbstractType('T'), 'abstract'),
        (tff.types.FederatedType(tf.float32, tff.CLIENTS), 'federated'),
        (tff.types.FunctionType(tf.int32, tf.float32), 'function'),
        (tff.types.PlacementType(), 'placement'),
        (tff.types.SequenceType(tf.float32), 'sequence'),
        (tff.types.StructType([tf.int32]), 'struct'),
        (tff.types.TensorType(tf.float32, [2]), 'tensor'),
    ],
)
def test_a_type_says_its_kind(type_, kind):
    assert {k: getattr(type_, f'is_{k}')() for k in KINDS} == {k: k == kind for k in KINDS}


def test_a_struct_says_whether_it_has_a_python_container():
    assert tff.types.to_type(collections.OrderedDict(a=tf.int32)).is_struct_with_python()
    assert not tff.types.StructType([('a', tf.int32)]).is_struct_with_python()
    assert not tff.types.TensorType(tf.int32).is_struct_with_python()


def test_type_from_tensors_of_eager_and_graph_tensors_and_variables():
    value = collections.OrderedDict(a=tf.constant([1.0, 2.0]), b=(tf.Variable(3), np.int64(4)))
    assert str(tff.types.type_from_tensors(value)) == '<a=float32[2],b=<int32,int64>>'
    seen = []

    @tff.tf_computation(tff.types.TensorType(tf.float32, [None]))
    def f(x):
        seen.append(str(tff.types.type_from_tensors([x, tf.zeros([2, 3], tf.int32)])))
        return x

    f(np.ones([4], np.float32))
    assert seen == ['<float32[?],int32[2,3]>']


def test_federated_min_and_max_under_their_aggregators_names(tff_stack):
    @tff.federated_computation(tff.types.FederatedType(tf.float32, tff.CLIENTS))
    def extremes(x):
        return tff.aggregators.federated_min(x), tff.aggregators.federated_max(x)

    assert extremes([3.0, -1.0, 2.5]) == (-1.0, 3.0)


def test_at_clients_and_at_server_in_types():
    assert str(tff.types.at_clients(tf.float32)) == '{float32}@CLIENTS'
    assert str(tff.types.at_clients(tf.int32, all_equal=True)) == 'int32@CLIENTS'
    assert str(tff.types.at_server(tf.int32)) == 'int32@SERVER'


def test_learning_model_is_the_variable_model():
    assert tff.learning.Model is tff.learning.models.VariableModel
