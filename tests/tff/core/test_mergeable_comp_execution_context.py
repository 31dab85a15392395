"""Port of TFF's ``tensorflow_federated/python/core/impl/execution_contexts/mergeable_comp_execution_context_test.py``.
No case left out.

TFF's file tests two private helpers of its context: ``_split_value_into_subrounds(value,
type, n)``, which is our `simharness.mergeable.split_into_subrounds(value, type, n)` (same
arguments, same result), and ``_repackage_partitioned_values(results, type)``, which joins
the subrounds' results of `after_merge` into one: ours is `simharness.mergeable._joined`
(same arguments). Each of TFF's round-trip cases (split into two subrounds, then joined)
runs here on ours and expects what TFF's expects.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import simharness as federated_language
from simharness import structure
from simharness.mergeable import _joined, split_into_subrounds

SERVER_INT = federated_language.FederatedType(np.int32, federated_language.SERVER)
CLIENTS_INT = federated_language.FederatedType(np.int32, federated_language.CLIENTS)
CLIENTS_ALL_EQUAL_INT = federated_language.FederatedType(
    np.int32, federated_language.CLIENTS, all_equal=True
)


# ---------------------------------------------------- PartitionValueTest


def test_partitions_value_with_no_clients_arguments():
    assert split_into_subrounds(0, SERVER_INT, 2) == [0, 0]


def test_wraps_value_with_empty_client_argument():
    type_signature = federated_language.StructType([(None, SERVER_INT), (None, CLIENTS_INT)])
    # No clients: one subround, on the value as it is.
    assert split_into_subrounds((0, []), type_signature, 2) == [(0, [])]


def test_replicates_all_equal_clients_argument():
    type_signature = federated_language.StructType(
        [(None, SERVER_INT), (None, CLIENTS_ALL_EQUAL_INT)]
    )
    assert split_into_subrounds((0, 1), type_signature, 2) == [(0, 1), (0, 1)]


def test_partitions_client_placed_value_into_subrounds():
    assert split_into_subrounds(list(range(10)), CLIENTS_INT, 5) == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
        [8, 9],
    ]


def test_partitions_clients_placed_struct_elem_into_subrounds():
    type_signature = federated_language.StructType([('a', SERVER_INT), ('b', CLIENTS_INT)])
    expected = [structure.Struct([('a', 0), ('b', [j, j + 1])]) for j in range(0, 10, 2)]
    assert split_into_subrounds((0, list(range(10))), type_signature, 5) == expected


def test_partitions_clients_server_struct_into_subrounds():
    type_signature = federated_language.StructType([('a', CLIENTS_INT), ('b', SERVER_INT)])
    assert split_into_subrounds((list(range(10)), 0), type_signature, 2) == [
        structure.Struct([('a', [0, 1, 2, 3, 4]), ('b', 0)]),
        structure.Struct([('a', [5, 6, 7, 8, 9]), ('b', 0)]),
    ]


def test_partitions_clients_server_clients_struct_into_subrounds():
    type_signature = federated_language.StructType(
        [('c1', CLIENTS_INT), ('s', SERVER_INT), ('c2', CLIENTS_INT)]
    )
    value = (list(range(10)), 99, list(range(100, 110)))
    assert split_into_subrounds(value, type_signature, 2) == [
        structure.Struct([('c1', [0, 1, 2, 3, 4]), ('s', 99), ('c2', [100, 101, 102, 103, 104])]),
        structure.Struct([('c1', [5, 6, 7, 8, 9]), ('s', 99), ('c2', [105, 106, 107, 108, 109])]),
    ]


def test_partitions_fewer_clients_than_rounds_into_nonempty_rounds():
    # Five subrounds asked for, two clients: two subrounds of one client each.
    assert split_into_subrounds([0, 1], CLIENTS_INT, 5) == [[0], [1]]


# --------------------------------------------------- RepackageResultsTest


def _round_trip(value, type_signature):
    return _joined(split_into_subrounds(value, type_signature, 2), type_signature)


def test_roundtrip_with_no_clients_argument():
    assert _round_trip(0, SERVER_INT) == 0


def test_roundtrip_with_named_struct():
    type_signature = federated_language.StructType([('a', SERVER_INT)])
    result = _round_trip(collections.OrderedDict(a=0), type_signature)
    assert result == structure.Struct([('a', 0)])
    assert isinstance(result, structure.Struct)


def test_roundtrip_with_empty_clients_argument():
    type_signature = federated_language.StructType([(None, SERVER_INT), (None, CLIENTS_INT)])
    assert _round_trip((0, []), type_signature) == structure.Struct([(None, 0), (None, [])])


def test_roundtrip_with_nonempty_clients_argument():
    result = _round_trip(list(range(10)), CLIENTS_INT)
    assert result == list(range(10))
    assert isinstance(result, list)


def test_roundtrip_with_nonempty_tuple_clients_argument():
    # TFF's slices and their concatenation keep the tuple: equal to the tuple, not a list.
    result = _round_trip(tuple(range(10)), CLIENTS_INT)
    assert result == tuple(range(10))
    assert isinstance(result, tuple)


def test_roundtrip_with_all_equal_clients_argument():
    type_signature = federated_language.StructType(
        [(None, SERVER_INT), (None, CLIENTS_ALL_EQUAL_INT)]
    )
    assert _round_trip((0, 1), type_signature) == structure.Struct([(None, 0), (None, 1)])


@pytest.mark.parametrize('num_subrounds', [1, 3, 4, 7, 12])
def test_roundtrip_of_clients_values_in_any_number_of_subrounds(num_subrounds):
    # Not TFF's: the subrounds cover every client once, in order, at most one per subround
    # and none empty; joined they are the argument again.
    type_signature = federated_language.StructType([('s', SERVER_INT), ('c', CLIENTS_INT)])
    value = (5, list(range(7)))
    parts = split_into_subrounds(value, type_signature, num_subrounds)
    assert len(parts) == min(num_subrounds, 7)
    sizes = [len(p['c']) for p in parts]
    assert all(sizes) and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert all(p['s'] == 5 for p in parts)
    assert _joined(parts, type_signature) == structure.Struct([('s', 5), ('c', list(range(7)))])
