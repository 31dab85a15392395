"""The typed stream plan (`runtime.stream_plan`): its wire kinds cross the codec as plain
data, values inside them are walked like containers, the driver-only and worker-only
kinds never cross, and each hop translates only its own kinds."""

import asyncio
import dataclasses

import msgpack
import numpy as np
import pytest

from simharness.core import types as T
from simharness.core.reduction import ReductionKind
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.leaf.stream_eval import node_merge, stream_reductions
from simharness.runtime import codec, protocol as P, service as S
from simharness.runtime.codec import CodecError, Ref, RefRange
from simharness.runtime.service import Session, WorkerService
from simharness.runtime.stream_plan import (
    WIRE_KINDS,
    PlanClients,
    PlanLoad,
    PlanMap,
    PlanReduction,
    PlanSame,
    PlanSelect,
    PlanSourced,
    PlanStacked,
    PlanValues,
    PlanZip,
    is_plan_part,
)

F32 = T.TensorType(np.float32)

WIRE = [
    PlanValues([Ref(1), Ref(2)]),
    PlanSame(Ref(3)),
    PlanSourced(7, {'kind': 'npz_dir', 'path': '/data'}, ['a', 'b'], None, F32),
    PlanMap(Ref(4), 0),
    PlanSelect(1, 3),
    PlanZip(('x', None), (0, 1)),
    PlanReduction('aggregate', (4,), {'zero': Ref(5), 'accumulate': Ref(6)}),
]


@pytest.mark.parametrize('part', WIRE, ids=lambda p: type(p).__name__)
def test_wire_kinds_round_trip_through_the_codec(part):
    assert type(part) in WIRE_KINDS and is_plan_part(part)
    back = codec.roundtrip(part)
    assert type(back) is type(part) and back == part


def test_stacked_rows_cross_as_buffers_and_are_evaluated_slice_by_slice():
    # The driver's clients' values, stacked, inside the plan: big leaves as buffers.
    t = T.StructType([('x', T.TensorType(np.float32, [3])), ('n', T.TensorType(np.int32))])
    x = (np.arange(120, dtype=np.float32) * 1.37).reshape(40, 3)
    n = np.arange(40, dtype=np.int32)
    big = np.arange(40 * 300, dtype=np.float32).reshape(40, 300)
    part = PlanStacked(
        [big, n],
        T.StructType([('w', T.TensorType(np.float32, [300])), ('n', T.TensorType(np.int32))]),
    )
    assert type(part) in WIRE_KINDS and part.map_values(lambda v: 1 / 0) is part
    header, buffers = codec.encode(part)
    assert any(b.shape == big.shape for b in buffers)
    back = codec.decode(header, buffers)
    assert type(back) is PlanStacked and back.type == part.type
    assert [a.tobytes() for a in back.leaves] == [big.tobytes(), n.tobytes()]
    # Evaluated in slices of 16: the partial of the same values sent one by one, bit for bit.
    ex = EagerTFExecutor()
    got = run(
        ex.create_streamed_reductions(
            [PlanStacked([x, n], t), PlanSelect(0, 0)],
            [PlanReduction('sum', (1,), {})],
            0,
            40,
            40,
            slice_size=16,
        )
    )
    vals = run(ex.create_values([{'x': x[k], 'n': n[k]} for k in range(40)], t))
    want = run(ex.create_partial_reduction('sum', run(ex.create_selections(vals, 0)), 0, 40, {}))
    a = run(ex.create_reduction_result('sum', got, 40, {}, t[0])).internal
    b = run(ex.create_reduction_result('sum', [want], 40, {}, t[0])).internal
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_driver_and_worker_kinds_never_cross():
    for part in (PlanClients(object(), F32), PlanLoad(lambda lo, hi: [], F32)):
        with pytest.raises(CodecError, match='cannot cross the worker seam'):
            codec.encode(P.Request(P.Op.STREAM_REDUCE, 1, [[part], [], 0, 1, 1, None]))


def test_plan_parts_are_frozen_and_map_only_their_value_fields():
    node = PlanMap('fn', 2)
    with pytest.raises(AttributeError):
        node.src = 3  # type: ignore[misc]
    mapped = node.map_values(str.upper)
    assert mapped == PlanMap('FN', 2) and hash(mapped) == hash(PlanMap('FN', 2))
    assert node == PlanMap('fn', 2)  # a new part; this one unchanged
    with pytest.raises(AttributeError):
        mapped.fn = 'x'  # type: ignore[misc]
    for part in WIRE:  # every wire kind: the same as dataclasses.replace would give
        assert part.map_values(lambda v: ('m', repr(v))) == dataclasses.replace(
            part, **{f: ('m', repr(getattr(part, f))) for f in part.VALUE_FIELDS}
        )
    assert PlanSelect(1, 0).map_values(lambda v: 1 / 0) == PlanSelect(1, 0)  # no value fields
    # The protocol walks values inside plan parts like containers (Refs resolve in the worker).
    tree = [[PlanValues(RefRange(10, 2)), PlanSame(Ref(3))], [PlanReduction('sum', (0,), {})]]
    got = P.map_leaves(
        tree,
        lambda x: (
            ('v', x.start) if isinstance(x, RefRange) else ('v', x.id) if isinstance(x, Ref) else x
        ),
    )
    assert got == [[PlanValues(('v', 10)), PlanSame(('v', 3))], [PlanReduction('sum', (0,), {})]]


def test_the_service_turns_sourced_nodes_into_loaders_and_keeps_the_rest():
    service = WorkerService(
        object(), worker_id=0, dataset_from_blob=lambda b: b, dataset_to_blob=lambda d: d
    )
    session = service.sessions.setdefault(1, Session(1))
    loads = []
    service._load_sourced = lambda s, token, source, ids, transform: (
        loads.append((token, source, list(ids), transform)) or [f'client {i}' for i in ids]
    )
    node = service._loader_node(session, PlanSourced(7, {'spec': 1}, ['a', 'b', 'c'], 'tr', F32))
    assert isinstance(node, PlanLoad) and node.type == F32
    assert loads == [(7, {'spec': 1}, [], 'tr')]  # the source is registered at once
    assert node.loader(1, 3) == ['client b', 'client c']
    assert loads[-1] == (7, None, ['b', 'c'], 'tr')
    same = PlanSame(3)
    assert service._loader_node(session, same) is same


def test_every_value_operation_is_in_the_service_table():
    service = WorkerService(
        object(), worker_id=0, dataset_from_blob=lambda b: b, dataset_to_blob=lambda d: d
    )
    ops = set(S._OPS) | set(service._session_ops) | set(service._control) | {P.Op.FREE}
    assert ops == set(P.Op)


def run(coro):
    return asyncio.run(coro)


def test_eager_evaluates_a_plan_by_node_type_and_rejects_unknown_kinds():
    ex = EagerTFExecutor()
    vals = run(ex.create_values([np.float32(k) for k in range(5)], F32))
    pairs = run(ex.create_structs([[v, v] for v in vals], ['a', 'b']))
    nodes = [
        PlanValues(pairs),
        PlanSelect(1, 0),
        PlanSame(vals[0]),
        PlanLoad(lambda lo, hi: [np.float32(2 * k) for k in range(lo, hi)], F32),
        PlanZip(('v', 'w'), (1, 3)),
        PlanSelect(0, 4),
    ]
    reds = [
        PlanReduction('sum', (1,), {}),
        PlanReduction('weighted_mean', (5, 3), {}),
        PlanReduction('max', (2,), {}),
    ]
    parts = run(ex.create_streamed_reductions(nodes, reds, 0, 5, 5, slice_size=16))
    whole = [
        run(ex.create_partial_reduction('sum', vals, 0, 5, {})),
        run(
            ex.create_partial_reduction(
                'weighted_mean',
                list(zip(vals, run(ex.create_values([np.float32(2 * k) for k in range(5)], F32)))),
                0,
                5,
                {},
            )
        ),
        run(ex.create_partial_reduction('max', [vals[0]] * 5, 0, 5, {})),
    ]
    for kind, p, q in zip(['sum', 'weighted_mean', 'max'], parts, whole):
        a = run(ex.create_reduction_result(kind, [p], 5, {}, F32)).internal
        b = run(ex.create_reduction_result(kind, [q], 5, {}, F32)).internal
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    with pytest.raises(Exception, match='unknown streaming plan node PlanSourced'):
        run(
            stream_reductions(
                ex,
                [PlanSourced(1, None, ['a'], None, F32)],
                [PlanReduction('sum', (0,), {})],
                0,
                1,
                1,
                16,
                lambda k, p: node_merge(ex, k, p),
            )
        )
    with pytest.raises(Exception, match="unknown reduction kind 'median'"):
        node_merge(ex, 'median', {})
    ex.close()


def test_a_plan_reduction_kind_crosses_as_its_plain_string():
    r = PlanReduction('weighted_mean', (0, 1), {})
    assert r.kind is ReductionKind.WEIGHTED_MEAN
    # The bytes of the kind's plain string, as before the enum (protocol version unchanged).
    plain = object.__new__(PlanReduction)
    for name, v in (('kind', 'weighted_mean'), ('srcs', (0, 1)), ('params', {})):
        object.__setattr__(plain, name, v)
    assert type(plain.kind) is str
    assert codec.encode(r) == codec.encode(plain)
    assert msgpack.packb('weighted_mean') in codec.encode(r)[0]
    assert codec.roundtrip(plain).kind is ReductionKind.WEIGHTED_MEAN
    # An unknown kind decodes as its string: the service refuses it, naming it
    # (tests/unit/test_worker_service.py).
    assert codec.roundtrip(PlanReduction('median', (0,), {})).kind == 'median'
