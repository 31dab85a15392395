"""`WorkerService` in-process: sessions, ids, operations, poisoning (no process, pipe or shm).

Every request goes through the codec both ways, as on a real transport.
"""

import msgpack
import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import types as T
from simharness.core.reduction import ReductionKind
from simharness.errors import ProtocolError, WorkerLostError
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.runtime import codec, protocol as P
from simharness.runtime.codec import Ref, RefRange
from simharness.runtime.protocol import Op
from simharness.runtime.service import WorkerService
from simharness.runtime.stream_plan import PlanReduction, PlanValues

F32 = T.TensorType(np.float32)


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.float32)
def check_positive(x):
    with tf.control_dependencies([tf.debugging.assert_positive(x, message='must be positive')]):
        return tf.identity(x)


@pytest.fixture
def service():
    s = WorkerService(EagerTFExecutor(), worker_id=3)
    yield s
    s.close()


def call(service, op, session, *args, out_base=0, n_out=0, free=()):
    req = P.Request(op, session, list(args), out_base, n_out, [list(f) for f in free])
    resp = codec.roundtrip(service.handle(codec.roundtrip(req)))
    return resp


def ok(resp):
    assert resp.ok, resp.error
    return resp


def test_values_live_in_their_session(service):
    ok(call(service, Op.OPEN_SESSION, 1))
    ok(call(service, Op.OPEN_SESSION, 2))
    # The same ids in two sessions hold different values.
    ok(call(service, Op.CREATE_VALUES, 1, [np.float32(1), np.float32(2)], F32, out_base=1, n_out=2))
    ok(
        call(
            service, Op.CREATE_VALUES, 2, [np.float32(10), np.float32(20)], F32, out_base=1, n_out=2
        )
    )
    r1 = ok(call(service, Op.COMPUTE_MANY, 1, RefRange(1, 2)))
    r2 = ok(call(service, Op.COMPUTE_MANY, 2, RefRange(1, 2)))
    assert [float(x) for x in r1.result] == [1.0, 2.0]
    assert [float(x) for x in r2.result] == [10.0, 20.0]
    ok(call(service, Op.CLOSE_SESSION, 1))
    assert list(service.sessions) == [2]
    r = call(service, Op.COMPUTE_MANY, 1, RefRange(1, 2))
    assert not r.ok and r.error.type_name.endswith('WorkerLostError') and r.error.retryable
    with pytest.raises(WorkerLostError, match='session 1 is not open on worker 3'):
        raise P.record_to_error(r.error)


def test_map_select_struct_and_partial_reduction(service):
    ok(call(service, Op.OPEN_SESSION, 5))
    fn = add_one.to_building_block()
    r = ok(call(service, Op.CREATE_VALUE, 5, fn, fn.type_signature, out_base=1, n_out=1))
    assert r.kind == P.Result.VALUES and r.types == fn.type_signature
    data = np.arange(40, dtype=np.float32).reshape(40, 1)
    ok(call(service, Op.CREATE_VALUES_STACKED, 5, [data[:, 0]], F32, out_base=2, n_out=40))
    m = ok(call(service, Op.CREATE_MAP, 5, Ref(1), RefRange(2, 40), None, out_base=42, n_out=40))
    assert m.count == 40 and m.types == F32
    ok(
        call(
            service,
            Op.CREATE_STRUCTS,
            5,
            [[Ref(42 + i), Ref(2 + i)] for i in range(40)],
            ['y', 'x'],
            out_base=82,
            n_out=40,
        )
    )
    sel = ok(call(service, Op.CREATE_SELECTIONS, 5, RefRange(82, 40), 0, out_base=122, n_out=40))
    assert sel.types == F32
    p = ok(call(service, Op.PARTIAL_REDUCTION, 5, 'sum', RefRange(122, 40), 0, 40, {}))
    assert p.kind == P.Result.DATA
    total = ok(
        call(service, Op.REDUCTION_RESULT, 5, 'sum', [p.result], 40, {}, F32, out_base=200, n_out=1)
    )
    assert total.count == 1
    out = ok(call(service, Op.COMPUTE_MANY, 5, [Ref(200)]))
    assert float(out.result[0]) == float(np.sum(data + 1))


def test_free_drops_values(service):
    ok(call(service, Op.OPEN_SESSION, 1))
    ok(call(service, Op.CREATE_VALUES, 1, [np.float32(1)] * 3, F32, out_base=1, n_out=3))
    ok(call(service, Op.FREE, 1, free=[(1, 2)]))
    assert sorted(service.sessions[1].values) == [3]
    r = call(service, Op.COMPUTE_MANY, 1, [Ref(1)])
    assert not r.ok and 'not held by worker 3' in r.error.message


def test_a_failed_operation_poisons_its_results(service):
    ok(call(service, Op.OPEN_SESSION, 1))
    fn = check_positive.to_building_block()
    ok(call(service, Op.CREATE_VALUE, 1, fn, fn.type_signature, out_base=1, n_out=1))
    ok(
        call(
            service, Op.CREATE_VALUES, 1, [np.float32(1), np.float32(-1)], F32, out_base=2, n_out=2
        )
    )
    bad = call(service, Op.CREATE_MAP, 1, Ref(1), RefRange(2, 2), None, out_base=4, n_out=2)
    assert not bad.ok and 'must be positive' in bad.error.message
    # A later request that uses the failed results reports the original error ...
    later = call(service, Op.CREATE_SELECTIONS, 1, RefRange(4, 2), 0, out_base=6, n_out=2)
    assert not later.ok and later.error.message == bad.error.message
    # ... and so does the one after it (poison spreads along the pipeline) ...
    last = call(service, Op.COMPUTE_MANY, 1, [Ref(6)])
    assert not last.ok and last.error.message == bad.error.message
    # ... while values made before it are fine.
    assert ok(call(service, Op.COMPUTE_MANY, 1, [Ref(2)])).result[0] == np.float32(1)


def test_bad_requests_are_protocol_errors(service):
    r = service.handle(P.Request(999, 1, []))
    assert not r.ok and r.error.type_name == 'simharness.errors.ProtocolError'
    r = service.handle(P.Request(Op.PING, 1, [], version=P.PROTOCOL_VERSION + 1))
    assert not r.ok and 'protocol version' in r.error.message
    with pytest.raises(ProtocolError):
        raise P.record_to_error(service.handle('not a request').error)


def test_ping_reports_sessions(service):
    ok(call(service, Op.OPEN_SESSION, 1))
    assert ok(call(service, Op.PING, 0)).result['sessions'] == 1


@pytest.mark.parametrize('kind', list(ReductionKind))
def test_a_reduction_kind_crosses_the_seam_as_its_plain_string(kind):
    # The bytes of a request that carries the enum are those of one that carries its string
    # (what a peer of the same protocol version sends and reads).
    args = [RefRange(1, 2), 0, 2, {}]
    as_enum = P.encode_message(P.Request(Op.PARTIAL_REDUCTION, 1, [kind, *args], seq=7))
    as_str = P.encode_message(P.Request(Op.PARTIAL_REDUCTION, 1, [kind.value, *args], seq=7))
    assert as_enum == as_str
    assert msgpack.packb(kind.value) in as_enum[0]


def test_an_unknown_reduction_kind_is_refused_naming_it_and_the_kinds(service):
    ok(call(service, Op.OPEN_SESSION, 1))
    ok(call(service, Op.CREATE_VALUES, 1, [np.float32(1)] * 2, F32, out_base=1, n_out=2))
    plan = [[PlanValues(RefRange(1, 2))], [PlanReduction('median', (0,), {})], 0, 2, 2, None]
    for r in (
        call(service, Op.PARTIAL_REDUCTION, 1, 'median', RefRange(1, 2), 0, 2, {}),
        call(service, Op.REDUCTION_RESULT, 1, 'median', [], 2, {}, F32, out_base=3, n_out=1),
        call(service, Op.STREAM_REDUCE, 1, *plan),
    ):
        assert not r.ok and r.error.type_name.endswith('SimharnessValueError')
        assert "unknown reduction kind 'median': expected one of 'sum', 'mean'" in r.error.message
        assert "'aggregate'" in r.error.message
    # The worker keeps serving the session.
    assert ok(call(service, Op.PARTIAL_REDUCTION, 1, 'sum', RefRange(1, 2), 0, 2, {})).ok
