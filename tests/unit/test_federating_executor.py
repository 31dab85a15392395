"""Unit tests of FederatingExecutor + FederatedResolvingStrategy over EagerTF children (no threads)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.errors import CardinalityError, SimharnessTypeError, SimharnessValueError
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.federating import FederatingExecutor, FederatingValue
from simharness.executors.reference_resolving import ReferenceResolvingExecutor
from simharness.executors.strategy.resolving_strategy import FederatedResolvingStrategy


def run(coro):
    return asyncio.run(coro)


F32 = T.TensorType(tf.float32)
F32_AT_C = sh.type_at_clients(tf.float32)
F32_AT_S = sh.type_at_server(tf.float32)


class CountingEager(EagerTFExecutor):
    def __init__(self):
        super().__init__()
        self.closed_count = 0

    def close(self):
        self.closed_count += 1
        super().close()


def make_federating(sizes, shared_child=False):
    """A FederatingExecutor whose client groups have `sizes` clients."""
    server, unplaced = CountingEager(), CountingEager()
    if shared_child:
        groups = [(server, n) for n in sizes]
    else:
        groups = [(CountingEager(), n) for n in sizes]
    fed = FederatingExecutor(FederatedResolvingStrategy.factory(server, groups), unplaced)
    return fed, server, unplaced, [g for g, _ in groups]


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.float32, tf.float32)
def add(a, b):
    return a + b


@sh.federated_computation(F32_AT_C, F32_AT_S)
def round_trip(xs, s):
    ys = sh.federated_map(add_one, xs)
    return [
        sh.federated_sum(ys),
        sh.federated_mean(ys),
        ys,
        sh.federated_map(add_one, sh.federated_broadcast(s)),
        sh.federated_aggregate(xs, 0.0, add, add, add_one),
    ]


def evaluate(executor, comp, arg):
    async def go():
        fn = await executor.create_value(comp.to_building_block(), comp.type_signature)
        a = await executor.create_value(arg, comp.type_signature.parameter)
        return await (await executor.create_call(fn, a)).compute()

    return run(go())


def as_numpy(x):
    if isinstance(x, (list, tuple)) or hasattr(x, 'names'):
        return [as_numpy(v) for v in x]
    return np.asarray(x.numpy() if hasattr(x, 'numpy') else x)


XS = [np.float32(v) for v in (0.5, -3.25, 1e6, 7.0, 1e-3)]


def test_results_do_not_depend_on_the_client_groups():
    results = []
    for sizes in ([5], [1, 1, 1, 1, 1], [2, 3], [0, 4, 0, 1]):
        fed, *_ = make_federating(sizes)
        with ReferenceResolvingExecutor(fed) as ex:
            results.append(as_numpy(evaluate(ex, round_trip, [XS, 2.0])))
    first = results[0]
    assert float(first[0]) == float(np.float32(sum(np.float32(x) + 1 for x in XS)))
    assert [float(v) for v in first[3]] == [3.0] * 5
    for other in results[1:]:
        assert [np.asarray(a).tobytes() for a in other[:2]] == [
            np.asarray(a).tobytes() for a in first[:2]
        ]
        assert [v.tobytes() for v in other[2]] == [v.tobytes() for v in first[2]]
        assert other[4].tobytes() == first[4].tobytes()


def test_client_values_are_split_over_the_groups():
    fed, server, unplaced, groups = make_federating([2, 1])
    v = run(fed.create_value([1.0, 2.0, 3.0], F32_AT_C))
    assert isinstance(v, FederatingValue) and v.kind == 'federated'
    assert [len(p) for p in v.payload] == [2, 1]
    assert [float(x) for x in run(v.compute())] == [1.0, 2.0, 3.0]
    s = run(fed.create_value(4.0, F32_AT_S))
    assert float(run(s.compute())) == 4.0
    all_equal = run(fed.create_value(5.0, sh.type_at_clients(tf.float32, all_equal=True)))
    assert float(run(all_equal.compute())) == 5.0


def test_cardinality_and_container_errors():
    fed, *_ = make_federating([2, 1])
    with pytest.raises(CardinalityError, match=r'list of 2 values for 3 clients') as e:
        run(fed.create_value([1.0, 2.0], F32_AT_C))
    assert (e.value.expected, e.value.actual) == (3, 2)
    with pytest.raises(
        SimharnessTypeError, match=r'\{float32\}@CLIENTS must be a list .* got float'
    ):
        run(fed.create_value(1.0, F32_AT_C))


def test_kinds_of_embedded_values():
    fed, *_ = make_federating([1])
    comp = run(fed.create_value(add_one.to_building_block()))
    assert comp.kind == 'unplaced' and comp.source is add_one.to_building_block()
    intrinsic = bb.Intrinsic('federated_sum', T.FunctionType(F32_AT_C, F32_AT_S))
    assert run(fed.create_value(intrinsic)).kind == 'intrinsic'
    assert run(fed.create_value(sh.CLIENTS)).kind == 'placement'
    # TFF 0.19's: a lambda is embedded as is; other blocks are the reference-resolving
    # layer's to evaluate (ValueError).
    assert run(fed.create_value(bb.Lambda('x', F32, bb.Reference('x', F32)))).kind == 'lambda'
    for block in (bb.Reference('x', F32), bb.Placement(sh.CLIENTS)):
        with pytest.raises(SimharnessValueError, match='Unsupported computation building block'):
            run(fed.create_value(block))
    struct = run(fed.create_value([[1.0], 3.0], T.StructType([F32_AT_C, F32])))
    assert struct.kind == 'struct' and [e.kind for _, e in struct.payload] == [
        'federated',
        'unplaced',
    ]


def test_intrinsic_called_directly():
    fed, *_ = make_federating([2, 2])
    fn = run(fed.create_value(bb.Intrinsic('federated_sum', T.FunctionType(F32_AT_C, F32_AT_S))))
    arg = run(fed.create_value([1.0, 2.0, 3.0, 4.0], F32_AT_C))
    out = run(fed.create_call(fn, arg))
    assert out.type_signature == F32_AT_S and float(run(out.compute())) == 10.0
    with pytest.raises(
        SimharnessTypeError, match=r'float32@SERVER is not assignable .* \{float32\}@CLIENTS'
    ):
        run(fed.create_call(fn, out))
    median = T.FunctionType(F32_AT_C, F32_AT_S)
    with pytest.raises(SimharnessValueError, match="unrecognized intrinsic 'federated_median'"):
        run(fed.create_value(bb.Intrinsic('federated_median', median)))
    bb.IntrinsicDef('FEDERATED_MEDIAN_TEST', 'federated_median_test')  # registered, not run
    bad = run(fed.create_value(bb.Intrinsic('federated_median_test', median)))
    with pytest.raises(NotImplementedError, match="'federated_median_test' is not supported"):
        run(fed.create_call(bad, arg))


def test_unplaced_call_with_a_federated_argument():
    fed, *_ = make_federating([1])
    fn = run(fed.create_value(add_one.to_building_block()))
    arg = run(fed.create_value([1.0], F32_AT_C))
    with pytest.raises(SimharnessTypeError):
        run(fed.create_call(fn, arg))
    ok = run(fed.create_call(fn, run(fed.create_value(1.0, tf.float32))))
    assert ok.kind == 'unplaced' and float(run(ok.compute())) == 2.0


def test_selection_from_a_federated_struct():
    fed, *_ = make_federating([2, 1])
    st = sh.type_at_clients([('a', tf.float32), ('b', tf.int32)])
    v = run(fed.create_value([[1.0, 1], [2.0, 2], [3.0, 3]], st))
    b = run(fed.create_selection(v, 1))
    assert b.type_signature == sh.type_at_clients(tf.int32)
    assert [int(x) for x in run(b.compute())] == [1, 2, 3]
    srv = run(fed.create_value([1.0, 7], sh.type_at_server([('a', tf.float32), ('b', tf.int32)])))
    assert int(run(run(fed.create_selection(srv, 1)).compute())) == 7


def test_close_closes_every_child_once():
    fed, server, unplaced, groups = make_federating([1, 1], shared_child=True)
    fed.close()
    fed.close()
    assert server.closed_count == 1 and unplaced.closed_count == 1
    fed, server, unplaced, groups = make_federating([1, 1])
    fed.close()
    assert [g.closed_count for g in groups] == [1, 1] and server.closed_count == 1
