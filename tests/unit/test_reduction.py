"""Unit tests of simharness.core.reduction: the canonical reduction order."""

from __future__ import annotations

import numpy as np
import pytest

from simharness.core.reduction import (
    ADDING_KINDS,
    CHUNK,
    EXTREMUM_FOLDS,
    SECURE_KINDS,
    Partial,
    Reducer,
    ReductionKind,
    extremum_identity,
)
from simharness.errors import SimharnessValueError

SIZES = [1, 3, 15, 16, 17, 100, 1000]


def _tree_reference(values, chunk, start, accumulate, merge):
    """The tree of the module docstring, written out directly."""
    accs = []
    for c in range(0, len(values), chunk):
        acc = start(values[c])
        for v in values[c + 1 : c + chunk]:
            acc = accumulate(acc, v)
        accs.append(acc)
    n = len(accs)

    def node(level, index):
        if level == 0:
            return accs[index]
        left = node(level - 1, 2 * index)
        if (2 * index + 1) << (level - 1) >= n:
            return left
        return merge(left, node(level - 1, 2 * index + 1))

    return node(max(0, (n - 1).bit_length()), 0)


def _text_reducer(total, chunk):
    # Non-associative, non-commutative: the result spells out the exact order.
    return Reducer(
        lambda v: f'{v}', lambda a, v: f'({a}+{v})', lambda a, b: f'[{a}|{b}]', total, chunk
    )


def _float_reducer(total, chunk):
    return Reducer(lambda v: np.float32(v), np.add, np.add, total, chunk)


def _random_blocks(rng, n):
    cuts = (
        sorted(set(rng.integers(1, n, size=rng.integers(0, min(n, 12))).tolist())) if n > 1 else []
    )
    bounds = [0] + cuts + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def _partials(reducer, values, blocks, rng):
    partials = []
    for lo, hi in blocks:
        b = reducer.begin(lo)
        pos = lo
        while pos < hi:  # feed in random pieces
            step = int(rng.integers(1, hi - pos + 1))
            b.feed(values[pos : pos + step])
            pos += step
        assert b.position == hi
        partials.append(b.finish())
    rng.shuffle(partials)  # combine sorts by start
    return partials


def _float_values(rng, n):
    signs = rng.choice(np.array([-1.0, 1.0]), n)
    return list((signs * 10.0 ** rng.uniform(-8, 8, n)).astype(np.float32))


@pytest.mark.parametrize('n', SIZES)
def test_text_order_matches_the_documented_tree(n):
    rng = np.random.default_rng(n)
    values = list(range(n))
    for chunk in (1, 2, 3, CHUNK):
        expected = _tree_reference(
            values, chunk, lambda v: f'{v}', lambda a, v: f'({a}+{v})', lambda a, b: f'[{a}|{b}]'
        )
        r = _text_reducer(n, chunk)
        assert r.combine([r.partial(values, 0)]) == expected
        for _ in range(4):
            blocks = _random_blocks(rng, n)
            assert r.combine(_partials(r, values, blocks, rng)) == expected, (chunk, blocks)


@pytest.mark.parametrize('n', SIZES)
def test_float_sums_bit_identical_for_any_partition(n):
    rng = np.random.default_rng(1000 + n)
    values = _float_values(rng, n)
    for chunk in (int(rng.integers(1, 8)), CHUNK):
        r = _float_reducer(n, chunk)
        single = r.combine([r.partial(values, 0)])
        assert single.dtype == np.float32
        for _ in range(4):
            got = r.combine(_partials(r, values, _random_blocks(rng, n), rng))
            assert got.tobytes() == single.tobytes()


def test_a_wrong_order_would_show():
    # The float data above is order-sensitive: a sequential fold differs.
    rng = np.random.default_rng(7)
    values = _float_values(rng, 1000)
    r = _float_reducer(1000, CHUNK)
    canonical = r.combine([r.partial(values, 0)])
    sequential = np.float32(0)
    for v in values:
        sequential = sequential + v
    assert canonical.tobytes() != sequential.tobytes()


def test_chunk_accumulators_fed_in_bulk_give_the_same_result():
    n, chunk = 70, 8
    values = list(range(n))
    r = _text_reducer(n, chunk)
    expected = r.combine([r.partial(values, 0)])
    # Block [5, 70): a head up to 8, whole chunks [8, 64) folded elsewhere, a tail.
    first = r.partial(values[:5], 0)
    b = r.begin(5)
    b.feed(values[5:8])
    accs = []
    for c in range(8, 64, chunk):
        acc = f'{values[c]}'
        for v in values[c + 1 : c + chunk]:
            acc = f'({acc}+{v})'
        accs.append(acc)
    b.feed_chunk_accumulators(accs)
    b.feed(values[64:])
    assert r.combine([first, b.finish()]) == expected


def test_partial_map_applies_to_every_value_and_keeps_the_layout():
    r = _text_reducer(40, 8)
    p = r.partial(list(range(3, 30)), 3)
    assert p.head == [3, 4, 5, 6, 7] and p.open_chunk == 3 and p.nodes
    q = p.map(lambda v: f'<{v}>')
    assert q.head == [f'<{v}>' for v in p.head]
    assert q.nodes == {k: f'<{v}>' for k, v in p.nodes.items()}
    assert q.open_acc == f'<{p.open_acc}>'
    assert (q.start, q.stop, q.open_chunk) == (p.start, p.stop, p.open_chunk)
    closed = r.partial(list(range(0, 16)), 0)
    assert closed.open_chunk is None and closed.map(str).open_acc is None


class TestErrors:
    def test_gap(self):
        r = _text_reducer(10, 4)
        with pytest.raises(SimharnessValueError, match='starting at 5'):
            r.combine([r.partial(range(4), 0), r.partial(range(5, 10), 5)])

    def test_overlap(self):
        r = _text_reducer(10, 4)
        with pytest.raises(SimharnessValueError, match='do not tile'):
            r.combine([r.partial(range(6), 0), r.partial(range(4, 10), 4)])

    def test_short_cover(self):
        r = _text_reducer(10, 4)
        with pytest.raises(
            SimharnessValueError, match=r'cover clients \[0, 8\), expected \[0, 10\)'
        ):
            r.combine([r.partial(range(8), 0)])

    def test_missing_first_block(self):
        r = _text_reducer(10, 4)
        with pytest.raises(SimharnessValueError, match='starting at 0'):
            r.combine([r.partial(range(2, 10), 2)])

    def test_zero_clients_and_negative_total(self):
        with pytest.raises(SimharnessValueError, match='zero clients'):
            _text_reducer(0, 4).combine([])
        with pytest.raises(SimharnessValueError, match='total must be >= 0'):
            _text_reducer(-1, 4)

    def test_feeding_past_the_total(self):
        r = _text_reducer(3, 4)
        with pytest.raises(SimharnessValueError, match='past the total 3'):
            r.partial(range(4), 0)

    def test_chunk_accumulators_off_a_boundary(self):
        r = _text_reducer(16, 4)
        b = r.begin(0)
        b.feed([0, 1])
        with pytest.raises(SimharnessValueError, match='chunk boundary'):
            b.feed_chunk_accumulators(['x'])
        b2 = r.begin(12)
        with pytest.raises(SimharnessValueError, match='not a whole chunk'):
            _text_reducer(14, 4).begin(12).feed_chunk_accumulators(['x'])
        assert b2.position == 12

    def test_unfinished_chunk(self):
        r = _text_reducer(8, 4)
        broken = Partial(0, 8, open_chunk=1, open_acc='x')
        with pytest.raises(SimharnessValueError, match='chunk 1 was left unfinished'):
            r.combine([broken])


@pytest.mark.parametrize('n', SIZES)
def test_join_of_adjacent_slices_is_the_partial_of_the_whole_block(n):
    # Streaming reduces a block slice by slice and joins the slices' partials:
    # the joined partial must be the one-piece partial, node for node (text
    # values spell the exact order of every fold and merge).
    rng = np.random.default_rng(2000 + n)
    values = list(range(n))
    for chunk in (1, 3, CHUNK):
        r = _text_reducer(n, chunk)
        for _ in range(6):
            lo = int(rng.integers(0, n))
            hi = int(rng.integers(lo + 1, n + 1))
            whole = r.partial(values[lo:hi], lo)
            cuts = sorted(set(rng.integers(lo + 1, hi, size=3).tolist())) if hi - lo > 1 else []
            bounds = [lo] + cuts + [hi]
            joined = None
            for a, b in zip(bounds[:-1], bounds[1:]):
                p = r.partial(values[a:b], a)
                joined = p if joined is None else r.join(joined, p)
            assert (joined.start, joined.stop) == (whole.start, whole.stop)
            assert joined.head == whole.head and joined.nodes == whole.nodes, (chunk, bounds)
            assert (joined.open_chunk, joined.open_acc) == (whole.open_chunk, whole.open_acc)


def test_join_refuses_blocks_that_are_not_adjacent():
    r = _text_reducer(40, 4)
    with pytest.raises(SimharnessValueError, match='cannot join'):
        r.join(r.partial(range(0, 5), 0), r.partial(range(6, 9), 6))


@pytest.mark.parametrize('adds', [False, True])
@pytest.mark.parametrize('start,n', [(0, 1), (0, 52), (5, 40), (48, 52), (3, 13), (16, 32)])
def test_rows_weighted_as_they_are_folded_give_the_bits_of_weighted_rows(start, n, adds):
    # A weighted mean's rows are multiplied by their weights while they are folded
    # (`scale`): the partial is that of the rows multiplied first, bit for bit, for a
    # block starting anywhere (a head, whole chunks, a tail); `adds`: whole chunks summed
    # in place (`_sum_chunks`), the same additions in the same order.
    from simharness.core.reduction import fold_rows_into

    rng = np.random.default_rng(start * 100 + n)
    xs = [
        (rng.standard_normal((n, 3, 2)) * 10.0 ** rng.uniform(-6, 6, (n, 1, 1))).astype(np.float32),
        np.broadcast_to(np.float32(rng.standard_normal()), (n,)),  # an all-equal leaf
        rng.standard_normal((n, 4)),  # float64
        rng.integers(-(2**31), 2**31 - 1, (n, 3)).astype(np.int32),
    ]  # wraps around
    w = rng.integers(1, 60, n).astype(np.int32)
    before = xs[0].tobytes()

    def add(a, x):
        return [np.add(p, q) for p, q in zip(a, x)]

    def partial(leaves, scale, in_place=False):
        r = Reducer(list, add, add, start + n, CHUNK)
        b = r.begin(start)
        with np.errstate(over='ignore'):
            fold_rows_into(b, leaves, start, list, add, scale=scale, adds=in_place)
        return b.finish()

    def as_bytes(p):
        return (
            [[np.asarray(a).tobytes() for a in v] for v in p.head],
            {k: [np.asarray(a).tobytes() for a in v] for k, v in p.nodes.items()},
            p.open_chunk,
            None if p.open_acc is None else [a.tobytes() for a in p.open_acc],
        )

    with np.errstate(over='ignore'):
        weighted = [x * w.astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1)) for x in xs]
    got = partial(xs + [w], (w, len(xs)), adds)
    assert as_bytes(got) == as_bytes(partial(weighted + [w], None))
    assert as_bytes(partial(weighted + [w], None, adds)) == as_bytes(got)
    assert [x.tobytes() for x in xs[:1]] == [before]  # the rows are only read
    assert got.nodes or got.open_acc is not None or got.head
    # the float32 leaf is order-sensitive: unweighted rows give other bits
    assert as_bytes(got) != as_bytes(partial(xs + [w], None))


def test_many_head_values_folded_at_once_give_the_bits_of_one_at_a_time():
    # `add_many_trees` (the numpy sums' accumulate_many) against `add_trees` value by
    # value: nested Structs, float32 rows big enough for the pooled buffers, int32
    # that wraps, 0-d leaves; a random partition of 100 clients into small blocks (most
    # clients arrive as head values, as with 16 workers of 6 clients).
    from simharness.core.reduction import add_many_trees, add_trees
    from simharness.core.struct import Struct
    from simharness.core.structure import flatten

    rng = np.random.default_rng(5)

    def value():
        return Struct(
            [
                (
                    'w',
                    Struct(
                        [
                            (None, (rng.standard_normal((256, 300)) * 1e3).astype(np.float32)),
                            (None, rng.standard_normal(7).astype(np.float32)),
                        ]
                    ),
                ),
                ('n', np.array(rng.integers(2**30, 2**31 - 1), np.int32)),
                ('m', rng.standard_normal(3)),
            ]
        )

    values = [value() for _ in range(100)]
    kept = [[np.array(x, copy=True) for x in flatten(v)] for v in values]
    one = Reducer(lambda v: v, add_trees, add_trees, 100)
    many = Reducer(lambda v: v, add_trees, add_trees, 100, accumulate_many=add_many_trees)
    sizes = [7, 7, 7, 7] + [6] * 12
    parts, s = [], 0
    for size in sizes:
        parts.append(one.partial(values[s : s + size], s))
        s += size
    want, got = one.combine(parts), many.combine(parts)
    assert isinstance(got, Struct) and got.names == ('w', 'n', 'm')
    for a, b in zip(flatten(want), flatten(got)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    # the int32 sum wrapped (it is not the exact sum), and no value was written to
    assert int(np.asarray(got['n'])) != sum(int(v['n']) for v in values)
    for v, k in zip(values, kept):
        assert all(x.tobytes() == y.tobytes() for x, y in zip(flatten(v), k))
    # one value or none: plain add_trees / the accumulator itself
    acc = values[0]
    assert add_many_trees(acc, []) is acc
    assert all(
        np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(
            flatten(add_many_trees(acc, [values[1]])), flatten(add_trees(acc, values[1]))
        )
    )


def test_head_rows_folded_row_by_row_give_the_bits_of_values_one_at_a_time():
    # A decoded head (`HeadRows`: one stacked array per leaf) folded by `add_many_trees`
    # without building its values, against `add_trees` value by value: float32 rows, a
    # 0-d leaf, a numpy scalar leaf (negative index in the template), int32 that wraps.
    from simharness.core.reduction import HeadRows, add_many_trees, add_trees
    from simharness.core.struct import Struct
    from simharness.core.structure import flatten

    rng = np.random.default_rng(7)
    k = 9
    big = (rng.standard_normal((k, 256, 300)) * 1e3).astype(np.float32)
    small = rng.standard_normal((k, 7)).astype(np.float32)
    zero_d = rng.standard_normal(k)
    ints = rng.integers(2**30, 2**31 - 1, size=k).astype(np.int32)
    before = [x.tobytes() for x in (big, small, zero_d, ints)]
    for template in (
        Struct([('w', Struct([(None, 0), (None, 1)])), ('m', 2), ('n', -4)]),
        Struct([('n', -4), ('w', Struct([(None, 0), (None, 1)])), ('m', 2)]),
    ):
        rows = HeadRows(template, [big, small, zero_d, ints])
        assert rows.leaf_rows() is not None  # folded without building values
        values = list(rows)
        assert len(values) == k and values[-1]['n'] == ints[-1]
        assert type(values[0]['n']) is np.int32 and values[0]['m'].shape == ()
        assert np.shares_memory(values[2]['w'][0], big)  # views, not copies
        acc = add_trees(values[0], values[1])  # the caller's own accumulator
        want = acc
        for v in values[2:]:
            want = add_trees(want, v)
        got = add_many_trees(
            add_trees(values[0], values[1]),
            HeadRows(template, [x[2:] for x in (big, small, zero_d, ints)]),
        )
        for a, b in zip(flatten(want), flatten(got)):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert [x.tobytes() for x in (big, small, zero_d, ints)] == before  # only read
    # with a tuple inside (`flatten` does not walk it), the values are built and folded
    assert HeadRows(Struct([('w', (0, 1))]), [big, small]).leaf_rows() is None
    rows = HeadRows(Struct([('x', 0)]), [small])
    assert len(rows[2:5]) == 3 and rows[-1]['x'].tobytes() == small[-1].tobytes()
    with pytest.raises(IndexError):
        rows[k]
    with pytest.raises(SimharnessValueError, match='equal length'):
        HeadRows(Struct([('x', 0), ('y', 1)]), [small, big[:3]])


def test_partials_joined_as_they_arrive_give_the_bits_of_the_combine():
    # The strategy joins each reduction's partials as the groups answer (`_Arrivals`, with
    # the server's `partial_joiner`): in any order of arrival, the bits of the combine of
    # them all; most clients are head values (16 blocks of 6-7), an int32 leaf wraps.
    import asyncio
    from simharness.core import types as T
    from simharness.core.reduction import add_trees
    from simharness.core.struct import Struct
    from simharness.core.structure import flatten
    from simharness.executors.leaf.eager_tf import EagerTFExecutor
    from simharness.executors.strategy.resolving_streams import _Arrivals

    rng = np.random.default_rng(11)
    n = 100
    values = [
        Struct(
            [
                ('w', (rng.standard_normal(300) * 1e3).astype(np.float32)),
                ('k', np.array(rng.integers(2**30, 2**31 - 1), np.int32)),
            ]
        )
        for _ in range(n)
    ]
    t = T.StructType([('w', T.TensorType(np.float32, [300])), ('k', T.TensorType(np.int32))])
    ex = EagerTFExecutor()

    def parts():  # fresh each time: a join may add into an accumulator it made
        one = Reducer(lambda v: v, add_trees, add_trees, n)
        out, s = [], 0
        for size in [7] * 4 + [6] * 12:
            out.append(one.partial(values[s : s + size], s))
            s += size
        return out

    def result(partials):
        async def go():
            v = await ex.create_reduction_result('sum', partials, n, {}, t)
            return [np.asarray(x) for x in flatten(await v.compute())]

        return asyncio.run(go())

    want = result(parts())
    assert int(want[1]) != sum(int(v['k']) for v in values)  # the int32 sum wrapped
    for order in (range(16), reversed(range(16)), rng.permutation(16)):
        ps = parts()
        came = _Arrivals(ex.partial_joiner('sum', n))
        for k in order:
            came.add(ps[k])
        joined = came.partials()
        assert [(p.start, p.stop) for p in joined] == [(0, n)]
        assert all(a.tobytes() == b.tobytes() for a, b in zip(want, result(joined)))
    # Kinds the server folds otherwise are not joined early: kept, in client order.
    assert ex.partial_joiner('aggregate', n) is None
    came = _Arrivals(None)
    for p in reversed(parts()):
        came.add(p)
    assert [p.start for p in came.partials()] == sorted(p.start for p in parts())


def test_a_reduction_kind_is_its_string():
    # A `str` subclass whose str() and format() are its value: the codec writes that value.
    assert ReductionKind.WEIGHTED_MEAN == 'weighted_mean'
    assert str(ReductionKind.SUM) == 'sum' and f'{ReductionKind.MAX}' == 'max'
    assert {'sum': 1}[ReductionKind.SUM] == 1
    assert ReductionKind.of('secure_modular_sum') is ReductionKind.SECURE_MODULAR_SUM
    assert ReductionKind.of(ReductionKind.MIN) is ReductionKind.MIN
    assert set(EXTREMUM_FOLDS) == {ReductionKind.MIN, ReductionKind.MAX}
    assert ADDING_KINDS | SECURE_KINDS | set(EXTREMUM_FOLDS) | {ReductionKind.AGGREGATE} == set(
        ReductionKind
    )
    # A string still names the kind where one is expected.
    assert extremum_identity('min', np.int32) == np.iinfo(np.int32).max


@pytest.mark.parametrize('bad', ['median', 'SUM', 3, None])
def test_an_unknown_reduction_kind_is_refused_naming_it_and_the_kinds(bad):
    with pytest.raises(SimharnessValueError) as e:
        ReductionKind.of(bad)
    msg = str(e.value)
    assert f'unknown reduction kind {bad!r}' in msg
    assert all(repr(k.value) in msg for k in ReductionKind), msg
