"""The codec of the worker seam: every value kind round-trips; anything else is refused."""

import collections
import functools
import pickle
import threading

import numpy as np
import pytest

from simharness.core import types as T
from simharness.core.reduction import HeadRows, Partial
from simharness.core.structure import Struct
from simharness.runtime import codec, protocol as P
from simharness.runtime.codec import BUFFER_MIN_BYTES, CodecError, DatasetBlob, Ref, RefRange


def _same(a, b):
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype == object:
            assert a.tolist() == b.tolist()
        else:
            assert a.tobytes() == b.tobytes()
    elif isinstance(a, Struct):
        assert a.names == b.names
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, Partial):
        assert (a.start, a.stop, a.open_chunk) == (b.start, b.stop, b.open_chunk)
        assert sorted(a.nodes) == sorted(b.nodes) and len(a.head) == len(b.head)
        for x, y in zip(a.head, b.head):
            _same(x, y)
        for k in a.nodes:
            _same(a.nodes[k], b.nodes[k])
        if a.open_chunk is not None:
            _same(a.open_acc, b.open_acc)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


NUMERIC_DTYPES = [
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
]


@pytest.mark.parametrize('dtype', NUMERIC_DTYPES)
@pytest.mark.parametrize('shape', [(), (3,), (2, 0), (700, 3)])
def test_numeric_arrays_round_trip_bit_exactly(dtype, shape):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(shape) * 1e3).astype(dtype)
    header, buffers = codec.encode(a)
    big = a.nbytes >= BUFFER_MIN_BYTES
    assert len(buffers) == (1 if big else 0)
    if big:
        assert len(header) < 200  # the bytes are not in the header
    _same(a, codec.decode(header, buffers))


def test_ml_dtypes_round_trip():
    import ml_dtypes

    for dt in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        a = np.arange(600, dtype=np.float32).astype(dt)
        _same(a, codec.roundtrip(a))


def test_string_arrays_and_scalars_round_trip():
    obj = np.array([[b'a', b'\x00bc'], [b'', b'xyz']], dtype=object)
    _same(obj, codec.roundtrip(obj))
    _same(np.array(['x', 'yz']), codec.roundtrip(np.array(['x', 'yz'])))
    for s in (
        np.float32(1.5),
        np.int64(-7),
        np.bool_(True),
        np.complex64(1 + 2j),
        np.float64('nan'),
    ):
        out = codec.roundtrip(s)
        assert type(out) is type(s) and out.tobytes() == s.tobytes()
    assert codec.roundtrip(np.bytes_(b'ab')) == b'ab'


def test_plain_data_and_containers_round_trip():
    big = b'g' * (1 << 17)
    obj = [
        None,
        True,
        False,
        0,
        -1,
        2**62,
        1.25,
        float('inf'),
        'text',
        b'bytes',
        big,
        (1, (2, 3)),
        [],
        {'a': 1, 'b': [1.0, 2]},
        {1: 'int key', (2, 3): 'tuple key'},
        collections.OrderedDict(z=1, a=2),
    ]
    header, buffers = codec.encode(obj)
    assert len(buffers) == 1  # the big bytes value travels as a buffer
    out = codec.decode(header, buffers)
    assert out[:15] == obj[:15]
    assert out[15] == {'z': 1, 'a': 2} and list(out[15]) == ['z', 'a']


def test_project_values_round_trip():
    arr = np.arange(1000, dtype=np.float32)
    s = Struct([('w', arr), (None, Struct([('b', np.int32(3))]))])
    _same(s, codec.roundtrip(s))
    p = Partial(16, 40, [arr[:3], arr[3:6]], {(0, 2): arr, (1, 2): arr * 2}, 2, s)
    _same(p, codec.roundtrip(p))
    assert codec.roundtrip([Ref(5), RefRange(3, 9)]) == [Ref(5), RefRange(3, 9)]
    blob = DatasetBlob(b'graph', T.TensorType(np.float32, [None, 3]))
    out = codec.roundtrip(blob)
    assert out.graph == b'graph' and out.element_type == blob.element_type
    assert codec.roundtrip(np.dtype(np.int16)) == np.dtype(np.int16)
    assert codec.roundtrip(np.dtype(object)) == np.dtype(object)


def _head_value(rows, k):
    # As a worker's summed call gives them: array leaves are rows of its outputs.
    return Struct(
        [
            ('delta', [rows[0][k], rows[1][k : k + 1].reshape(rows[1].shape[1:])]),
            ('n', np.float32(k)),
            ('loss', np.array(0.5 * k, np.float64)),
            (None, (np.int32(k), np.full(3, k, np.int64))),
        ]
    )


def test_head_values_travel_as_one_buffer_per_leaf_and_come_back_alike():
    rng = np.random.default_rng(0)
    rows = [
        rng.normal(size=(14, 60, 16)).astype(np.float32),
        rng.normal(size=(14, 300)).astype(np.float32),
    ]
    head = [_head_value(rows, k) for k in range(14)]
    p = Partial(50, 64, head, {}, None, None)
    header, buffers = codec.encode(p)
    # the two big leaves, each all 14 rows in one buffer (the small ones inline), and no
    # copy: the buffers are the rows the values were views of
    assert [b.shape for b in buffers] == [(14, 60, 16), (14, 300)]
    assert np.shares_memory(buffers[0], rows[0]) and np.shares_memory(buffers[1], rows[1])
    out = codec.decode(header, buffers)
    _same(p, out)
    assert type(out.head[3].n) is np.float32 and out.head[3].loss.shape == ()
    # decoded, the head stays rows (values built on demand); sent on, it goes as it came
    assert isinstance(out.head, HeadRows) and len(out.head) == 14
    header2, buffers2 = codec.encode(out)
    assert [b.shape for b in buffers2] == [(14, 60, 16), (14, 300)]
    assert all(np.shares_memory(x, y) for x, y in zip(buffers2, buffers))
    _same(p, codec.decode(header2, buffers2))


def test_malformed_head_rows_are_a_clear_error():
    rows = HeadRows(
        Struct([('x', 0), ('n', -2)]), [np.zeros((3, 4), np.float32), np.arange(3, dtype=np.int32)]
    )
    for bad in (Struct([('x', 2)]), Struct([('x', -3)]), Struct([('x', 'a')]), 1.5):
        rows.template = bad  # as a peer could send it
        header, buffers = codec.encode(Partial(5, 8, rows, {}, None, None))
        with pytest.raises(CodecError, match='malformed head rows.*not the index'):
            codec.decode(header, buffers)


def test_head_values_of_other_shapes_or_kinds_travel_one_by_one():
    a = np.arange(2000, dtype=np.float32)
    for head in (
        [Struct([('x', a[:1000])]), Struct([('x', a[:999])])],  # shapes differ
        [Struct([('x', a[:1000])]), Struct([('y', a[1000:])])],  # names differ
        [[a[:1000], 1.5], [a[1000:], 2.5]],  # a Python float
        [np.array([b'x', b'y']), np.array([b'z', b'w'])],  # strings
        [a[:1000], a[1000:].astype(np.float64)[:1000]],
    ):  # dtypes differ
        p = Partial(3, 3 + len(head), head, {}, None, None)
        _same(p, codec.roundtrip(p))
    copied = [a[:1000] * 1, a[1000:] * 2]  # not rows of one array: stacked by a copy
    header, buffers = codec.encode(Partial(3, 5, copied, {}, None, None))
    assert buffers[0].shape == (2, 1000) and not np.shares_memory(buffers[0], copied[0])
    _same(Partial(3, 5, copied, {}, None, None), codec.decode(header, buffers))


TYPES = [
    T.TensorType(np.float32),
    T.TensorType(np.int64, [None, 3]),
    T.TensorType(np.dtype(object), [2]),
    T.TensorType(np.float32, None),
    T.StructType([('a', T.TensorType(np.float32)), (None, T.TensorType(np.bool_, [4]))]),
    T.SequenceType(T.StructType([('x', T.TensorType(np.float32, [None, 2]))])),
    T.FunctionType(T.TensorType(np.float32), T.TensorType(np.float32)),
    T.FunctionType(None, T.StructType([])),
    T.FederatedType(T.TensorType(np.float32), T.CLIENTS),
    T.FederatedType(T.TensorType(np.int32), T.SERVER),
    T.FederatedType(T.TensorType(np.int32), T.CLIENTS, all_equal=True),
    T.PlacementType(),
]


@pytest.mark.parametrize('t', TYPES, ids=str)
def test_types_round_trip(t):
    out = codec.roundtrip(t)
    assert out == t and str(out) == str(t)


def test_struct_type_container_stays_on_the_sending_side():
    Point = collections.namedtuple('Point', 'x y')
    t = T.to_type(Point(np.float32, np.int32))
    out = codec.roundtrip(t)
    assert out == t and out.container is None


def test_compiled_computation_round_trips_as_its_graph():
    import tensorflow as tf
    import simharness as sh

    @sh.tf_computation(tf.float32)
    def add_one(x):
        return x + 1.0

    comp = add_one.to_building_block()
    out = codec.roundtrip(comp)
    assert out.fingerprint == comp.fingerprint
    assert out.graph.graph_def == comp.graph.graph_def
    assert out.type_signature == comp.type_signature


class _UserThing:
    pass


@pytest.mark.parametrize(
    'bad',
    [
        _UserThing(),
        lambda x: x,
        functools.partial(print, 1),
        threading.Lock(),
        {1, 2},
        np.array([_UserThing()], dtype=object),
        collections.namedtuple('P', 'a')(1),
        2**70,
        np.zeros(2, dtype=[('a', 'f4')]),
        print,
    ],
    ids=lambda b: type(b).__name__,
)
def test_arbitrary_python_objects_are_refused(bad):
    with pytest.raises(CodecError) as e:
        codec.encode({'payload': [1, bad]})
    assert isinstance(e.value, TypeError)  # a SimharnessTypeError


def test_a_refused_value_deep_in_a_message_leaves_the_thread_s_encoder_clean():
    """The encoder (and its packers, one per nesting level) is reused by the next message."""
    msg = [Struct([('a', np.arange(600, dtype=np.float32)), ('b', (1, Ref(3)))]), RefRange(1, 2)]
    before = codec.encode(msg)
    for _ in range(3):
        with pytest.raises(CodecError):
            codec.encode([Struct([('a', (1, [2, _UserThing()]))]), np.zeros(300, np.int32)])
        header, buffers = codec.encode(msg)
        assert header == before[0] and len(buffers) == len(before[1]) == 1
        _same(codec.decode(header, buffers), msg)


def test_threads_encoding_at_once_each_get_their_own_bytes():
    msgs = [
        [Struct([('x', np.full(300 + k, k, np.float32))]), Partial(k, k + 1, [], {})]
        for k in range(8)
    ]
    want = [codec.encode(m) for m in msgs]
    got = {}

    def run(k):
        for _ in range(200):
            h, b = codec.encode(msgs[k])
            if h != want[k][0] or [x.tobytes() for x in b] != [x.tobytes() for x in want[k][1]]:
                got[k] = 'differs'
                return
        got[k] = 'same'

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {k: 'same' for k in range(8)}


def test_a_value_encoded_beforehand_decodes_as_itself_first_or_after_other_buffers():
    value = Struct(
        [('w', np.arange(2000, dtype=np.float32)), ('k', 3), ('v', np.arange(400, dtype=np.int64))]
    )
    packed = codec.Packed(value)
    assert len(packed.buffers) == 2
    first, bufs = codec.encode([packed, T.TensorType(np.int32)])
    assert packed.payload in first and len(bufs) == 2  # carried as encoded
    _same(codec.decode(first, bufs), [value, T.TensorType(np.int32)])
    # After another buffer its numbers would be off: it is encoded again, and still decodes.
    other = np.ones(1000, np.float32)
    header, bufs = codec.encode([other, packed])
    assert len(bufs) == 3
    _same(codec.decode(header, bufs), [other, value])


def test_decoding_never_unpickles():
    evil = pickle.dumps(_UserThing())
    with pytest.raises(CodecError):
        codec.decode(evil)
    with pytest.raises(CodecError):
        codec.decode(b'\xc1garbage')


def test_missing_buffer_is_a_clear_error():
    header, buffers = codec.encode(np.zeros(1000, np.float32))
    with pytest.raises(CodecError, match='buffer 0'):
        codec.decode(header, [])


def test_request_and_response_messages_round_trip():
    req = P.Request(P.Op.CREATE_MAP, 7, [Ref(1), RefRange(2, 3), None], 10, 3, [[4, 2]], 99)
    out = codec.roundtrip(req)
    assert out == req
    resp = P.Response(False, error=P.ErrorRecord('builtins.ValueError', 'bad', 'tb', {'x': 1}))
    assert codec.roundtrip(resp) == resp


def test_check_request_refuses_unknown_ops_versions_and_arity():
    from simharness.errors import ProtocolError

    with pytest.raises(ProtocolError, match='unknown operation'):
        P.check_request(P.Request(4242, 1, []))
    with pytest.raises(ProtocolError, match='version'):
        P.check_request(P.Request(P.Op.PING, 1, [], version=1))
    with pytest.raises(ProtocolError, match='takes 2 arguments'):
        P.check_request(P.Request(P.Op.CREATE_VALUE, 1, [1]))


def test_errors_are_rebuilt_as_project_builtin_or_tf_classes():
    from simharness.errors import CardinalityError, WorkerError

    rec = P.error_to_record(CardinalityError('3 vs 4', expected=3, actual=4), 'tb text')
    err = P.record_to_error(codec.roundtrip(rec), worker_id=1, pid=2)
    assert type(err) is CardinalityError and err.expected == 3 and err.actual == 4
    assert 'tb text' in err.__cause__.remote_traceback
    err = P.record_to_error(P.error_to_record(KeyError('k')))
    assert type(err) is KeyError
    import tensorflow as tf

    err = P.record_to_error(P.error_to_record(tf.errors.InvalidArgumentError(None, None, 'nope')))
    assert isinstance(err, tf.errors.InvalidArgumentError) and 'nope' in str(err)
    # An unknown class is never imported: a WorkerError naming it.
    err = P.record_to_error(P.ErrorRecord('os.system', 'x'))
    assert type(err) is WorkerError and 'os.system' in str(err)
