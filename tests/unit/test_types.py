"""Unit tests of simharness.core.types (no executor, no process)."""

from __future__ import annotations

import collections
import pickle

import attrs
import numpy as np
import pytest
import tensorflow as tf

from simharness.core import narrowing as N
from simharness.core import types as T
from simharness.core.types import (
    CLIENTS,
    SERVER,
    FederatedType,
    FunctionType,
    PlacementType,
    SequenceType,
    StructType,
    TensorType,
    to_type,
)
from simharness.errors import SimharnessTypeError, SimharnessValueError

Point = collections.namedtuple('Point', ['x', 'y'])


@attrs.define
class Pair:
    a: object
    b: object


class TestTensorType:
    def test_construction_from_tf_and_numpy_dtypes(self):
        t = TensorType(tf.float32, [2, None])
        assert t.dtype == np.dtype(np.float32) and t.shape == (2, None)
        assert t == TensorType(np.float32, (2, None)) == TensorType('float32', [2, None])
        assert TensorType(tf.int64, tf.TensorShape([3])).shape == (3,)
        assert TensorType(tf.float32, tf.TensorShape(None)).shape is None
        assert TensorType(tf.int32, 4).shape == (4,)
        assert TensorType(tf.string).dtype == np.dtype(object)

    def test_str(self):
        assert str(TensorType(tf.float32)) == 'float32'
        assert str(TensorType(tf.float32, [None, 3])) == 'float32[?,3]'
        assert str(TensorType(tf.int32, None)) == 'int32[?*]'
        assert str(TensorType(tf.string)) == 'str'
        assert repr(TensorType(tf.bool, [1])) == 'TensorType(bool[1])'

    def test_equality_and_hash(self):
        a, b = TensorType(tf.float32, [2]), TensorType(np.float32, (2,))
        assert a == b and hash(a) == hash(b) and len({a, b}) == 1
        assert a != TensorType(tf.float32, [3]) and a != TensorType(tf.float64, [2])
        assert a != TensorType(tf.float32, [None])

    def test_properties(self):
        assert TensorType(tf.float32, [2, 3]).rank == 2
        assert TensorType(tf.float32, None).rank is None
        assert TensorType(tf.float32, [2, 3]).is_fully_defined
        assert not TensorType(tf.float32, [2, None]).is_fully_defined

    def test_bad_specs(self):
        # as tf.TensorShape: a negative dimension is a ValueError, a non-int one a TypeError
        with pytest.raises(SimharnessValueError, match='negative dimension'):
            TensorType(tf.float32, [-1])
        with pytest.raises(SimharnessTypeError, match=r'dimension 1.5 \(float\)'):
            TensorType(tf.float32, [1.5])
        with pytest.raises(SimharnessTypeError, match='None is not a dtype'):
            TensorType(None)
        with pytest.raises(TypeError, match="'notadtype'"):
            TensorType('notadtype')

    def test_assignability_with_unknown_dimensions(self):
        assert TensorType(tf.float32, [None]).is_assignable_from(TensorType(tf.float32, [3]))
        assert not TensorType(tf.float32, [3]).is_assignable_from(TensorType(tf.float32, [None]))
        assert TensorType(tf.float32, None).is_assignable_from(TensorType(tf.float32, [2, 3]))
        assert not TensorType(tf.float32, [2]).is_assignable_from(TensorType(tf.float32, None))
        assert not TensorType(tf.float32, [None]).is_assignable_from(TensorType(tf.float32, [2, 2]))
        assert not TensorType(tf.float32).is_assignable_from(TensorType(tf.float64))
        assert not TensorType(tf.float32).is_assignable_from(StructType([tf.float32]))


class TestStructType:
    def test_construction(self):
        t = StructType([('a', tf.float32), tf.int32])
        assert len(t) == 2 and t.names == ('a', None)
        assert t[0] == t['a'] == t.a == TensorType(tf.float32)
        assert t[1] == TensorType(tf.int32)
        assert t.items() == [('a', TensorType(tf.float32)), (None, TensorType(tf.int32))]
        assert str(t) == '<a=float32,int32>'
        assert str(StructType([])) == '<>'

    def test_errors(self):
        with pytest.raises(SimharnessValueError, match="duplicate element name 'a'"):
            StructType([('a', tf.float32), ('a', tf.int32)])  # TFF: ValueError
        with pytest.raises(SimharnessTypeError, match="no element named 'z'"):
            StructType([('a', tf.float32)]).index_of('z')
        with pytest.raises(AttributeError):
            StructType([('a', tf.float32)]).z

    def test_equality_and_hash_ignore_the_container(self):
        a = to_type(Point(tf.float32, tf.int32))
        b = StructType([('x', tf.float32), ('y', tf.int32)])
        assert a == b and hash(a) == hash(b)
        assert a.container is Point and b.container is None
        assert a != StructType([('y', tf.float32), ('x', tf.int32)])
        assert a != StructType([tf.float32, tf.int32])

    def test_pickles_with_its_container(self):
        t = pickle.loads(pickle.dumps(to_type(Point(tf.float32, (tf.int32, [2])))))
        assert t == StructType([('x', tf.float32), ('y', (tf.int32, [2]))]) and t.container is Point

    def test_unnamed_source_elements_match_named_targets_not_vice_versa(self):
        named = StructType([('a', tf.float32), ('b', tf.int32)])
        unnamed = StructType([tf.float32, tf.int32])
        assert named.is_assignable_from(unnamed)
        assert not unnamed.is_assignable_from(named)
        assert not named.is_assignable_from(StructType([('b', tf.float32), ('a', tf.int32)]))
        assert not named.is_assignable_from(StructType([tf.float32]))
        assert not named.is_assignable_from(StructType([tf.float32, tf.float32]))
        assert StructType([('a', (tf.float32, [None]))]).is_assignable_from(
            StructType([('a', (tf.float32, [5]))])
        )

    def test_check_assignable_names_both_types(self):
        with pytest.raises(
            SimharnessTypeError, match=r'<int32> is not assignable .* <a=float32>'
        ) as e:
            StructType([('a', tf.float32)]).check_assignable_from(StructType([tf.int32]))
        assert e.value.expected == StructType([('a', tf.float32)])
        assert e.value.actual == StructType([tf.int32])


class TestOtherTypes:
    def test_sequence_type(self):
        t = SequenceType(tf.float32)
        assert str(t) == 'float32*' and t.element == TensorType(tf.float32)
        assert t == SequenceType(np.float32) and hash(t) == hash(SequenceType(np.float32))
        assert str(SequenceType([('a', tf.int32)])) == '<a=int32>*'
        assert SequenceType((tf.float32, [None])).is_assignable_from(
            SequenceType((tf.float32, [2]))
        )
        assert not SequenceType(tf.float32).is_assignable_from(TensorType(tf.float32))
        with pytest.raises(SimharnessTypeError, match='sequence elements may not be'):
            SequenceType(T.type_at_clients(tf.float32))
        with pytest.raises(SimharnessTypeError, match='sequence elements may not be'):
            SequenceType(SequenceType(tf.float32))

    def test_function_type(self):
        t = FunctionType(tf.int32, tf.float32)
        assert (
            str(t) == '(int32 -> float32)'
            and str(FunctionType(None, tf.float32)) == '( -> float32)'
        )
        assert t == FunctionType(np.int32, np.float32) and hash(t) == hash(
            FunctionType(np.int32, np.float32)
        )
        # Parameters are contravariant, results covariant.
        wide = FunctionType((tf.float32, [None]), tf.float32)
        narrow = FunctionType((tf.float32, [3]), tf.float32)
        assert narrow.is_assignable_from(wide) and not wide.is_assignable_from(narrow)
        assert FunctionType(tf.int32, (tf.float32, [None])).is_assignable_from(
            FunctionType(tf.int32, (tf.float32, [3]))
        )
        assert not FunctionType(None, tf.int32).is_assignable_from(FunctionType(tf.int32, tf.int32))

    def test_placement_type(self):
        assert str(PlacementType()) == 'placement'
        assert PlacementType().is_assignable_from(PlacementType())
        assert pickle.loads(pickle.dumps(CLIENTS)) is CLIENTS
        assert T.placement_from_uri('server') is SERVER
        with pytest.raises(ValueError, match='unknown placement'):
            T.placement_from_uri('edge')


class TestFederatedType:
    def test_construction_and_str(self):
        assert str(T.type_at_clients(tf.float32)) == '{float32}@CLIENTS'
        assert str(T.type_at_clients(tf.float32, all_equal=True)) == 'float32@CLIENTS'
        assert str(T.type_at_server(tf.float32)) == 'float32@SERVER'
        assert FederatedType(tf.float32, SERVER).all_equal
        assert not FederatedType(tf.float32, CLIENTS).all_equal
        t = T.type_at_clients([('a', tf.int32)])
        assert t.member == StructType([('a', tf.int32)]) and t.placement is CLIENTS

    def test_equality_hash_and_pickle(self):
        a = T.type_at_clients(tf.float32)
        assert a == FederatedType(np.float32, CLIENTS) and hash(a) == hash(
            FederatedType(np.float32, CLIENTS)
        )
        assert a != T.type_at_clients(tf.float32, all_equal=True)
        assert a != T.type_at_server(tf.float32)
        assert pickle.loads(pickle.dumps(a)) == a

    def test_all_equal_is_not_assignable_from_per_client_values(self):
        all_equal = T.type_at_clients(tf.float32, all_equal=True)
        per_client = T.type_at_clients(tf.float32)
        assert not all_equal.is_assignable_from(per_client)
        assert per_client.is_assignable_from(all_equal)
        assert not per_client.is_assignable_from(T.type_at_server(tf.float32))
        assert T.type_at_clients((tf.float32, [None])).is_assignable_from(
            T.type_at_clients((tf.float32, [2]))
        )

    @pytest.mark.parametrize(
        'member',
        [
            T.type_at_server(tf.float32),
            FunctionType(None, tf.float32),
            [tf.int32, T.type_at_clients(tf.float32)],
        ],
        ids=['federated', 'function', 'struct-with-federated'],
    )
    def test_members_may_not_be_federated_or_functional(self, member):
        with pytest.raises(SimharnessTypeError, match='may not be federated or functional'):
            FederatedType(member, CLIENTS)

    def test_placement_must_be_a_literal(self):
        with pytest.raises(SimharnessTypeError, match="'clients' \\(str\\) is not a placement"):
            FederatedType(tf.float32, 'clients')


class TestToType:
    @pytest.mark.parametrize(
        'spec, expected',
        [
            (tf.float32, 'float32'),
            (np.int32, 'int32'),
            (np.dtype('int16'), 'int16'),
            (float, 'float64'),
            (bool, 'bool'),
            (tf.string, 'str'),
            ((tf.float32, [2, None]), 'float32[2,?]'),
            ((np.float32, 3), 'float32[3]'),
            ((tf.int32, None), 'int32[?*]'),
            (tf.TensorSpec([None, 2], tf.float32), 'float32[?,2]'),
            (tf.data.DatasetSpec(tf.TensorSpec([2], tf.int32)), 'int32[2]*'),
            ([tf.float32, tf.int32], '<float32,int32>'),
            ((tf.int32, tf.int32), '<int32,int32>'),
            ([('a', tf.float32), ('b', (tf.int32, [2]))], '<a=float32,b=int32[2]>'),
            ({'a': tf.float32}, '<a=float32>'),
            (collections.OrderedDict(a=tf.float32, b=[tf.int32]), '<a=float32,b=<int32>>'),
            (Point(tf.float32, tf.int32), '<x=float32,y=int32>'),
            (Pair(a=tf.float32, b=tf.bool), '<a=float32,b=bool>'),
        ],
    )
    def test_specs(self, spec, expected):
        assert str(to_type(spec)) == expected

    @pytest.mark.parametrize(
        'spec, container',
        [
            ([tf.float32], list),
            ((tf.float32,), tuple),
            ({'a': tf.float32}, dict),
            (collections.OrderedDict(a=tf.float32), collections.OrderedDict),
            (Point(tf.float32, tf.int32), Point),
            (Pair(a=tf.float32, b=tf.int32), Pair),
        ],
    )
    def test_containers_are_remembered(self, spec, container):
        assert to_type(spec).container is container

    def test_name_type_pairs_make_a_named_struct_without_container(self):
        t = to_type([('a', tf.float32), ('b', tf.int32)])
        assert t.names == ('a', 'b') and t.container is None

    def test_types_pass_through(self):
        t = TensorType(tf.float32)
        assert to_type(t) is t

    @pytest.mark.parametrize(
        'spec, message',
        [
            (None, 'None is not a type spec'),
            (object(), r'cannot convert .* \(object\) to a type'),
            (Pair, 'attrs class, not a type spec'),
            ('notadtype', "'notadtype'"),
        ],
    )
    def test_bad_specs(self, spec, message):
        with pytest.raises(SimharnessTypeError, match=message):
            to_type(spec)


class TestInferType:
    @pytest.mark.parametrize(
        'value, expected',
        [
            (1, 'int32'),
            (1.0, 'float32'),
            (True, 'bool'),
            ('abc', 'str'),
            (np.float64(2), 'float64'),
            (np.zeros((2, 3), np.int8), 'int8[2,3]'),
            ([1, 2.0], '<int32,float32>'),
            ({'a': 1}, '<a=int32>'),
            (Point(1, 2.0), '<x=int32,y=float32>'),
            (tf.constant([1.0, 2.0]), 'float32[2]'),
        ],
    )
    def test_values(self, value, expected):
        assert str(T.infer_type(value)) == expected

    def test_dataset(self):
        ds = tf.data.Dataset.from_tensor_slices({'x': np.zeros((4, 2), np.float32)})
        assert str(T.infer_type(ds)) == '<x=float32[2]>*'

    def test_errors(self):
        with pytest.raises(SimharnessTypeError, match='is a type, not a value'):
            T.infer_type(TensorType(tf.float32))
        with pytest.raises(SimharnessTypeError, match='cannot infer a type'):
            T.infer_type(object())


def test_flatten_type_and_helpers():
    t = StructType([('a', tf.float32), ('b', [tf.int32, SequenceType(tf.float32)])])
    assert [str(x) for x in T.flatten_type(t)] == ['float32', 'int32', 'float32*']
    assert not T.contains_only_tensors(t)
    assert T.contains_only_tensors(StructType([tf.float32, (tf.int32, [2])]))
    assert T.is_numeric_dtype(np.dtype(np.int8)) and not T.is_numeric_dtype(np.dtype(np.bool_))
    assert not T.is_numeric_dtype(np.dtype(np.complex64))


@pytest.mark.parametrize(
    'arr, t, batched, reason',
    [
        (
            np.array([1, 2], np.int64),
            TensorType(np.float32, [2]),
            False,
            None,
        ),  # ints for floats: exact
        (np.array([1.5]), TensorType(np.int32, [1]), False, 'dtype float64 is not assignable'),
        (np.array([True]), TensorType(np.int32, [1]), False, 'dtype bool is not assignable'),
        (np.array([1]), TensorType(np.bool_, [1]), False, 'dtype int64 is not assignable'),
        (
            np.zeros((0,), np.bool_),
            TensorType(np.int32, [None]),
            False,
            None,
        ),  # empty: nothing lost
        (
            np.array([300]),
            TensorType(np.uint8, [1]),
            False,
            'out of the range [0, 255] of uint8[1]',
        ),
        (np.zeros((2, 3), np.float32), TensorType(np.float32, [2]), False, 'shape (2, 3)'),
        (np.zeros((5, 3), np.float32), TensorType(np.float32, [3]), True, None),  # 5 clients of [3]
        (np.zeros((5, 2), np.float32), TensorType(np.float32, [3]), True, 'shape (2,)'),
        (np.zeros((5, 2), np.float32), TensorType(np.float32, [None]), True, None),
    ],
)
def test_array_refusal_is_the_one_rule_for_client_values(arr, t, batched, reason):
    got = T.array_refusal(arr, t, batched=batched)
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got, got


def test_stacking_follows_the_refusal_rule():
    from simharness.core.batching import stack_python_values

    t = TensorType(np.int32, [2])
    a = np.array
    assert [x.dtype for x in stack_python_values([a([1, 2]), a([3, 4])], t)] == [np.int32]
    assert stack_python_values([a([1.5, 2]), a([3, 4])], t) is None  # float for int: per value
    assert stack_python_values([a([1, 2]), a([3, 2**40])], t) is None  # out of int32's range
    assert stack_python_values([a([1, 2, 3]), a([3, 4, 5])], t) is None  # another shape


def test_stacking_dicts_by_name_matches_the_struct_path():
    # Plain dicts of a flat named struct type are read column by column (no Struct per
    # client): the arrays of the general path, and the same refusals.
    from simharness.core.batching import stack_python_values
    from simharness.core.structure import Struct

    t = StructType(
        [('x', TensorType(np.float32, [2])), ('n', TensorType(np.int32))],
        container=collections.OrderedDict,
    )
    vals = [
        collections.OrderedDict(n=np.int32(i), x=np.arange(2, dtype=np.float32) + i)
        for i in range(3)
    ]  # keys in another order: matched by name
    as_structs = [Struct([('x', v['x']), ('n', v['n'])]) for v in vals]
    got, want = stack_python_values(vals, t), stack_python_values(as_structs, t)
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    assert [g.dtype for g in got] == [np.float32, np.int32]
    assert stack_python_values([{'x': [1.0, 2.0], 'm': 1}] * 2, t) is None  # another name
    assert stack_python_values([{'x': [1.0, 2.0]}] * 2, t) is None  # one missing
    assert stack_python_values([{'x': [1.0, 2.0], 'n': 2**40}] * 2, t) is None  # range
    assert stack_python_values([{'x': {'a': 1.0}, 'n': 1}] * 2, t) is None  # not a tensor
    mixed = [dict(x=np.zeros(2, np.float32), n=1), dict(x=np.ones(2), n=np.int64(2))]
    assert [g.tolist() for g in stack_python_values(mixed, t)] == [[[0, 0], [1, 1]], [1, 2]]
    assert stack_python_values([dict(x=np.zeros(2), n=1), dict(x=[1.0, 2.0], n=2)], t) is None


def test_map_nest_rebuilds_python_containers():
    from simharness.core.structure import Struct, map_nest

    P = collections.namedtuple('P', 'a b')
    value = collections.OrderedDict(x=[1, (2, P(3, {'y': 4}))], s=Struct.unnamed(5))
    out = map_nest(lambda v: v * 10 if isinstance(v, int) else v, value)
    assert type(out) is collections.OrderedDict and type(out['x'][1][1]) is P
    assert out['x'] == [10, (20, P(30, {'y': 40}))]
    assert out['s'] == Struct.unnamed(5)  # a Struct is a leaf here


class TestNarrowing:
    """`simharness.core.narrowing`: a known kind of type, or a TypeError naming it."""

    def test_narrowing_returns_the_type_itself(self):
        fn = T.FunctionType(T.StructType([np.int32, ('b', np.float32)]), T.type_at_server(np.int32))
        assert N.as_function(fn) is fn
        assert N.as_federated(fn.result) is fn.result
        assert N.as_struct(fn.parameter) is fn.parameter
        assert N.as_tensor_or_struct(T.TensorType(np.int32)) == T.TensorType(np.int32)
        assert N.as_tensor_or_struct(fn.parameter) is fn.parameter
        assert N.parameter_element(fn, 1) == T.TensorType(np.float32)
        assert N.parameter_element(fn, 'b') == T.TensorType(np.float32)
        assert N.member_of(fn.result) == T.TensorType(np.int32)

    @pytest.mark.parametrize(
        'narrow, value, expected',
        [
            (N.as_function, T.TensorType(np.int32), 'a function type'),
            (N.as_federated, T.TensorType(np.int32), 'a federated type'),
            (N.as_struct, T.type_at_clients(np.int32), 'a struct type'),
            (N.as_tensor_or_struct, T.SequenceType(np.int32), 'a tensor or struct type'),
            (N.as_struct, None, 'a struct type'),
            (N.member_of, T.TensorType(np.int32), 'a federated type'),
        ],
    )
    def test_another_kind_is_a_type_error_naming_the_expected_kind(self, narrow, value, expected):
        with pytest.raises(TypeError, match=f'expected {expected}, got'):
            narrow(value)

    def test_what_names_the_value_in_the_message(self):
        with pytest.raises(SimharnessTypeError, match='initialize result: expected a federated'):
            N.as_federated(T.TensorType(np.int32), 'initialize result')

    def test_the_parameter_of_a_no_arg_function_is_no_struct(self):
        with pytest.raises(TypeError, match='next parameter: expected a struct type, got None'):
            N.parameter_element(T.FunctionType(None, np.int32), 0, 'next')


def test_struct_types_compare_by_names_and_elements():
    a = T.StructType([('x', np.int32), ('y', np.float32)])
    assert a == T.StructType([('x', np.int32), ('y', np.float32)])
    assert a != T.StructType([('x', np.int32), ('z', np.float32)])
    assert a != T.StructType([('x', np.int32), ('y', np.int32)])
    assert a != T.StructType([np.int32, np.float32])
    assert a != 'x'
