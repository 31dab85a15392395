"""TFF 0.87's `tff.types` errors and helpers, `tff.test`'s static aggregation assertions,
`tff.framework`'s intrinsic definitions: by TFF's names, with TFF's results.

The expected values were checked against TFF 0.87 itself (the same calls, renamed).
"""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

I32, F32 = tff.TensorType(np.int32), tff.TensorType(np.float32)
Point = collections.namedtuple('Point', 'x y')


# ---------------------------------------------------------------- type errors


@pytest.mark.parametrize(
    'check, error, sentence',
    [
        (lambda: I32.check_assignable_from(F32), 'TypeNotAssignableError', None),
        (
            lambda: I32.check_equivalent_to(F32),
            'TypesNotEquivalentError',
            'Type `int32` is not equivalent to type `float32`',
        ),
        (
            lambda: I32.check_identical_to(F32),
            'TypesNotIdenticalError',
            'Type `int32` is not identical to type `float32`',
        ),
    ],
)
def test_type_checks_raise_tffs_error_classes(check, error, sentence):
    cls = getattr(tff.types, error)
    with pytest.raises(cls) as caught:
        check()
    assert isinstance(caught.value, TypeError)
    if sentence is not None:
        assert str(caught.value) == sentence


def test_type_errors_carry_both_types_and_survive_pickling():
    err = tff.types.TypeNotAssignableError(F32, I32)
    assert str(err) == 'Type `float32` is not assignable to type `int32`'
    assert (err.source_type, err.target_type) == (F32, I32)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is tff.types.TypeNotAssignableError
    assert (str(back), back.source_type, back.target_type) == (str(err), F32, I32)
    unexpected = tff.types.UnexpectedTypeError(tff.StructType, I32)
    assert isinstance(unexpected, TypeError) and unexpected.actual == I32
    assert 'found type int32' in str(unexpected)


def test_the_mismatch_sentence_falls_back_to_repr_when_the_one_line_forms_agree():
    plain = tff.StructType([('x', np.float32), ('y', np.int32)])
    with_container = tff.to_type(Point(np.float32, np.int32))
    text = tff.types.type_mismatch_error_message(
        plain, with_container, tff.types.TypeRelation.IDENTICAL, second_is_expected=True
    )
    assert text.startswith('Type `StructType(') and 'is not identical to expected type' in text
    assert tff.types.TypeRelation.ASSIGNABLE.value == 'assignable'


def test_no_error_when_the_relation_holds():
    I32.check_assignable_from(I32)
    I32.check_equivalent_to(tff.TensorType(np.int32))
    I32.check_identical_to(tff.TensorType(np.int32))


# ---------------------------------------------------------------- type helpers

NESTED = tff.FederatedType(
    tff.StructType([('a', np.int32), ('b', tff.SequenceType(np.float32))]), tff.CLIENTS
)


def test_children_and_the_predicate_walks():
    assert list(NESTED.children()) == [NESTED.member]
    assert list(NESTED.member.children()) == [I32, tff.SequenceType(np.float32)]
    fn = tff.FunctionType(I32, F32)
    assert list(fn.children()) == [I32, F32]
    assert list(tff.FunctionType(None, F32).children()) == [F32]
    assert list(I32.children()) == []
    is_tensor = lambda t: isinstance(t, tff.TensorType)  # noqa: E731
    assert tff.types.count(NESTED, is_tensor) == 2
    assert tff.types.contains(NESTED, lambda t: isinstance(t, tff.SequenceType))
    assert not tff.types.contains(NESTED.member, lambda t: isinstance(t, tff.FederatedType))
    assert tff.types.contains_only(tff.StructType([I32, F32]), lambda t: not t.is_federated())
    assert not tff.types.is_tensorflow_compatible_type(NESTED)
    assert tff.types.is_tensorflow_compatible_type(NESTED.member)
    assert tff.types.is_tensorflow_compatible_type(None)


def test_shape_helpers():
    assert tff.types.num_elements_in_shape((2, 3)) == 6
    assert tff.types.num_elements_in_shape(()) == 1
    assert tff.types.num_elements_in_shape((None, 3)) is None
    assert tff.types.is_shape_fully_defined((4,))
    assert not tff.types.is_shape_fully_defined(None)


def test_conversion_helpers_are_under_tff_types_too():
    pt = tff.to_type(Point(np.float32, np.int32))
    value = tff.structure.Struct([('x', 1.0), ('y', 2)])
    assert tff.types.type_to_py_container(value, pt) == Point(1.0, 2)
    specs = tff.types.type_to_tf_tensor_specs(pt)
    assert specs == Point(tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int32))
    zeros = tff.types.structure_from_tensor_type_tree(lambda t: np.zeros([], t.dtype), pt)
    assert isinstance(zeros, Point) and zeros.y.dtype == np.int32


def test_struct_with_python_type_is_a_class_to_test_against():
    pt = tff.to_type(Point(np.float32, np.int32))
    assert isinstance(pt, tff.StructWithPythonType)
    assert isinstance(pt, tff.StructType)
    assert not isinstance(tff.StructType([('x', np.float32)]), tff.StructWithPythonType)
    made = tff.StructWithPythonType([('x', np.float32)], collections.OrderedDict)
    assert isinstance(made, tff.StructWithPythonType)
    assert made.python_container is collections.OrderedDict
    with pytest.raises(TypeError, match='container_type must be a class'):
        tff.StructWithPythonType([np.int32], 3)


def test_structure_readers_take_struct_types():
    pt = tff.to_type(Point(np.float32, np.int32))
    assert tff.structure.to_elements(pt) == [('x', F32), ('y', I32)]
    assert tff.structure.name_list(pt) == ['x', 'y']
    assert tff.structure.name_list_with_nones(tff.StructType([I32])) == [None]
    assert tff.structure.name_to_index_map(pt) == {'x': 0, 'y': 1}
    assert tff.structure.has_field(pt, 'y') and not tff.structure.has_field(pt, 'z')
    assert list(tff.structure.iter_elements(pt)) == [('x', F32), ('y', I32)]


def test_a_polymorphic_computation_has_no_type_signature_attribute():
    @tff.tensorflow.computation
    def add_half(x):
        return x + 0.5

    assert not hasattr(add_half, 'type_signature')
    with pytest.raises(TypeError, match='polymorphic'):
        add_half.type_signature  # noqa: B018  (the property raises)
    assert add_half(1.0) == 1.5


# ---------------------------------------------------------------- framework


def test_framework_intrinsic_definitions_name_their_uris():
    assert tff.framework.FEDERATED_AGGREGATE.uri == 'federated_aggregate'
    assert tff.framework.FEDERATED_ZIP_AT_SERVER.uri == 'federated_zip_at_server'
    assert tff.framework.FEDERATED_MAP.name == 'FEDERATED_MAP'
    assert issubclass(tff.framework.RetryableError, Exception)


# ---------------------------------------------------------------- static assertions

_ASSERTS = (
    'assert_contains_secure_aggregation',
    'assert_not_contains_secure_aggregation',
    'assert_contains_unsecure_aggregation',
    'assert_not_contains_unsecure_aggregation',
)


def _verdicts(comp):
    out = []
    for name in _ASSERTS:
        try:
            getattr(tff.test, name)(comp)
            out.append('ok')
        except AssertionError:
            out.append('fails')
    return out


def _computations():
    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def secure(x):
        return tff.federated_secure_sum_bitwidth(x, 8)

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def mean(x):
        return tff.federated_mean(x)

    to_int = tff.tensorflow.computation(lambda v: tf.cast(v, tf.int32), np.float32)

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def both(x):  # each inside a computation it calls
        return mean(x), secure(tff.federated_map(to_int, x))

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def neither(x):
        return tff.federated_map(tff.tensorflow.computation(lambda v: v + 1, np.float32), x)

    return {'secure': secure, 'mean': mean, 'both': both, 'neither': neither}


# TFF 0.87's verdicts for the same computations.
@pytest.mark.parametrize(
    'name, verdicts',
    [
        ('secure', ['ok', 'fails', 'fails', 'ok']),
        ('mean', ['fails', 'ok', 'ok', 'fails']),
        ('both', ['ok', 'fails', 'ok', 'fails']),
        ('neither', ['fails', 'ok', 'fails', 'ok']),
    ],
)
def test_static_assertions_find_the_aggregations(name, verdicts):
    assert _verdicts(_computations()[name]) == verdicts


def test_a_learning_process_with_a_secure_aggregator_passes_the_secure_assertions():
    def model_fn():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        spec = (tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None, 1], tf.float32))
        return tff.learning.models.from_keras_model(
            model, input_spec=spec, loss=tf.keras.losses.MeanSquaredError()
        )

    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=tff.learning.secure_aggregator(weighted=True),
        metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize,
    )
    assert _verdicts(process.next) == ['ok', 'fails', 'fails', 'ok']


def test_static_assertions_name_what_they_found_and_refuse_a_polymorphic_computation():
    with pytest.raises(AssertionError, match=r'found 1:\n\t'):
        tff.test.assert_not_contains_secure_aggregation(_computations()['secure'])

    @tff.tensorflow.computation
    def poly(x):
        return x

    with pytest.raises(TypeError, match='polymorphic computation has none'):
        tff.test.assert_contains_secure_aggregation(poly)


# ---------------------------------------------------------------- secure-sum metric groups


def test_secure_sum_metric_groups_come_in_tffs_order():
    # TFF 0.87 walks the metrics with dm-tree (a mapping's keys sorted, an OrderedDict's
    # too): its groups and their order, recorded from TFF 0.87 for this type.
    metrics_type = tff.to_type(
        collections.OrderedDict(
            zz=np.float32,
            aa=np.int32,
            mm=np.int64,
            bb=tff.TensorType(np.int32, [3]),
            nest=collections.OrderedDict(y=np.float32, b=np.int64),
        )
    )
    process = tff.learning.metrics.SecureSumFactory().create(metrics_type)
    assert str(process.initialize.type_signature) == (
        '( -> <0/1048575/int32=<>,0/1048575/int64=<>,None/default_estimation_process/float32='
        '<<current_estimate=float32,target_quantile=float32,learning_rate=float32,'
        'below_estimate_state=<>>,<>>>@SERVER)'
    )
    value = collections.OrderedDict(
        zz=np.float32(1.5),
        aa=np.int32(2),
        mm=np.int64(3),
        bb=np.array([1, 2, 3], np.int32),
        nest=collections.OrderedDict(y=np.float32(0.25), b=np.int64(7)),
    )
    out = process.next(process.initialize(), [value] * 3)
    assert list(out.measurements) == [
        '0/1048575/int32',
        '0/1048575/int64',
        'None/default_estimation_process/float32',
    ]
    assert list(out.result) == ['zz', 'aa', 'mm', 'bb', 'nest']  # the metrics' own order
    assert (out.result['zz'], out.result['aa'], out.result['nest']['b']) == (4.5, 6, 21)
    np.testing.assert_array_equal(out.result['bb'], [3, 6, 9])
