"""The graph rewrite that turns `tf.data` loops over in-memory data into tensor loops.

These tests look at what is lowered (the conformance tests check that the
numbers do not change): a client update written with ``dataset.reduce``,
``for batch in dataset`` (with or without ``break``), ``map`` / ``filter``
before the loop, or a Keras model inside, must come out with no dataset op
left; uses the rewrite does not cover must be refused, not mis-lowered.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core.sequences import TensorBatches
from simharness.core.tf_sequences import recognize
from simharness.executors.leaf.embedded_function import EmbeddedFunction
from simharness.executors.leaf.sequence_lowering import (
    UNROLL_LIMIT,
    NotLowerable,
    SourceSpec,
    lower_graph,
)

BATCH = sh.to_type((sh.TensorType(tf.float32, [None, 2]), sh.TensorType(tf.int32, [None])))
SEQ = sh.SequenceType(BATCH)
X = np.arange(14, dtype=np.float32).reshape(7, 2)
Y = np.arange(7, dtype=np.int32)


def _batches(b=3, drop=False):
    return TensorBatches([tf.constant(X), tf.constant(Y)], b, drop, BATCH)


def _embedded(comp):
    return EmbeddedFunction(comp.to_building_block())


def _dataset_ops(graph_def) -> set:
    ops = {n.op for n in graph_def.node}
    for f in graph_def.library.function:
        ops.update(n.op for n in f.node_def)
    return {o for o in ops if 'Dataset' in o}


def _lowered_graph_ops(fn):
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(fn.comp.graph.graph_def)
    return _dataset_ops(gd)


@sh.tf_computation(SEQ)
def total_by_reduce(ds):
    return ds.reduce(tf.constant(0.0), lambda acc, b: acc + tf.reduce_sum(b[0]))


@tf.function
def _loop_with_break(ds):
    acc = tf.constant(0.0)
    for x, _ in ds:
        if acc > 20.0:
            break
        acc += tf.reduce_sum(x)
    return acc


ROW = sh.to_type((sh.TensorType(tf.float32, [2]), sh.TensorType(tf.int32, [])))


@sh.tf_computation(sh.SequenceType(ROW))
def total_by_rows(ds):
    return ds.reduce(tf.constant(0.0), lambda acc, r: acc + tf.reduce_sum(r[0]))


@sh.tf_computation(SEQ)
def total_with_break(ds):
    return _loop_with_break(ds)


@sh.tf_computation(SEQ)
def total_after_map_filter(ds):
    ds = ds.map(lambda x, y: (x + 1.0, y)).filter(lambda x, y: tf.reduce_min(y) > 0)
    return ds.reduce(tf.constant(0.0), lambda acc, b: acc + tf.reduce_sum(b[0]))


@sh.tf_computation(SEQ)
def total_by_take(ds):
    return ds.skip(1).take(2).reduce(tf.constant(0.0), lambda acc, b: acc + tf.reduce_sum(b[0]))


@sh.tf_computation(SEQ)
def filter_then_scan(ds):
    # a scan after a filter must see only the elements the filter keeps
    kept = ds.filter(lambda x, y: tf.reduce_max(y) % 2 == 0)
    running = kept.scan(tf.constant(0.0), lambda s, b: (s + tf.reduce_sum(b[0]), s))
    return running.take(3).reduce(tf.constant(0.0), lambda acc, s: acc * 2.0 + s)


@sh.tf_computation(SEQ)
def rebatched(ds):  # not lowered (batch inside the computation): runs through tf.data
    return ds.unbatch().batch(2).reduce(tf.constant(0.0), lambda a, b: a + tf.reduce_sum(b[0]))


@tf.function
def _first_batch_sum(ds):
    return tf.reduce_sum(next(iter(ds))[0])


@sh.tf_computation(SEQ)
def first_batch_sum(ds):
    return _first_batch_sum(ds)


@tf.function
def _sum_in_function(ds):
    return ds.reduce(tf.constant(0.0), lambda acc, b: acc + tf.reduce_sum(b[0]))


@sh.tf_computation(SEQ, SEQ)
def two_datasets(a, b):
    return _sum_in_function(a) - _sum_in_function(b)


@pytest.mark.parametrize(
    'comp',
    [total_by_reduce, total_with_break, total_after_map_filter, total_by_take, filter_then_scan],
)
def test_loops_lower_to_no_dataset_op(comp):
    fn = _embedded(comp)
    lowered = fn.lowered({0: _batches()})
    assert lowered is not None
    assert _lowered_graph_ops(lowered) == set()
    # the lowered function takes the components where the dataset was
    assert [str(t) for t in sh.core.types.flatten_type(lowered.type_signature.parameter)] == [
        'float32[?,2]',
        'int32[?]',
    ]


@pytest.mark.parametrize('comp', [total_with_break, total_by_take, filter_then_scan])
@pytest.mark.parametrize('b, drop', [(3, False), (3, True), (7, False), (10, False), (1, True)])
def test_lowered_loop_sees_the_batches_tf_data_gives(comp, b, drop):
    fn = _embedded(comp)
    tb = _batches(b, drop)
    lowered = fn.lowered({0: tb})
    got = lowered.call_flat(tb.components)[0]
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(b, drop_remainder=drop)
    want = fn.call_flat([tf.data.experimental.to_variant(ds)])[0]
    assert got.numpy().tobytes() == want.numpy().tobytes()


def _graph_ops(fn) -> set:
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(fn.comp.graph.graph_def)
    return {n.op for n in gd.node} | {n.op for f in gd.library.function for n in f.node_def}


@pytest.mark.parametrize(
    'rows, b, loop', [(7, 3, False), (UNROLL_LIMIT, None, False), (2 * UNROLL_LIMIT + 2, 2, True)]
)
def test_short_sources_unroll_long_sources_loop(rows, b, loop):
    x = np.arange(2 * rows, dtype=np.float32).reshape(rows, 2)
    y = np.arange(rows, dtype=np.int32)
    fn = _embedded(total_by_reduce if b is not None else total_by_rows)
    tb = TensorBatches([tf.constant(x), tf.constant(y)], b, False, BATCH if b is not None else ROW)
    lowered = fn.lowered({0: tb})
    assert ('While' in _graph_ops(lowered)) == loop
    got = lowered.call_flat(tb.components)[0]
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if b is not None:
        ds = ds.batch(b)
    want = fn.call_flat([tf.data.experimental.to_variant(ds)])[0]
    assert got.numpy().tobytes() == want.numpy().tobytes()


def test_unrolled_functions_are_kept_per_number_of_elements():
    fn = _embedded(total_by_reduce)
    three = fn.lowered({0: _batches(3)})  # 7 rows: 3 batches
    assert fn.lowered({0: _batches(3)}) is three
    assert fn.lowered({0: _batches(4, True)}) is not three  # 1 batch
    # a filter may drop elements: its loop stays a loop
    assert 'While' in _graph_ops(_embedded(total_after_map_filter).lowered({0: _batches(3)}))


@sh.tf_computation(SEQ)
def total_of_a_large_body(ds):
    def step(acc, b):
        x = b[0]
        for k in range(250):  # a body of many ops, as a recurrent model's step has
            x = tf.tanh(x * (1.0 + k * 1e-3))
        return acc + tf.reduce_sum(x)

    return ds.reduce(tf.constant(0.0), step)


def test_a_large_body_runs_one_loop_for_every_length():
    """Tracing an unrolled copy per number of elements costs more than a loop for a large
    body: one lowered function (a loop) serves sequences of every length, and computes
    what the unrolled form does."""
    from simharness.executors.leaf.embedded_function import UNROLL_MAX_NODES

    big, small = _embedded(total_of_a_large_body), _embedded(total_by_reduce)
    assert not big.unrolls_loops and small.unrolls_loops
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(big.comp.graph.graph_def)
    assert len(gd.node) + sum(len(f.node_def) for f in gd.library.function) > UNROLL_MAX_NODES

    def batches(rows):  # batches of 2: 2, 3 and 4 elements
        x = np.arange(2 * rows, dtype=np.float32).reshape(rows, 2)
        y = np.arange(rows, dtype=np.int32)
        return (x, y), TensorBatches([tf.constant(x), tf.constant(y)], 2, False, BATCH)

    lowered = {rows: big.lowered({0: batches(rows)[1]}) for rows in (4, 6, 8)}
    assert len({id(f) for f in lowered.values()}) == 1
    assert 'While' in _graph_ops(lowered[6])
    for rows in (4, 6, 8):
        arrays, tb = batches(rows)
        got = lowered[rows].call_flat(tb.components)[0]
        want = big.call_flat(
            [tf.data.experimental.to_variant(tf.data.Dataset.from_tensor_slices(arrays).batch(2))]
        )[0]
        assert got.numpy().tobytes() == want.numpy().tobytes()


def test_only_the_lowered_sequence_changes():
    fn = _embedded(two_datasets)
    lowered = fn.lowered({1: _batches()})
    assert lowered is not None
    types = [str(t) for t in sh.core.types.flatten_type(lowered.type_signature.parameter)]
    assert types[0].startswith('<') and types[1:] == ['float32[?,2]', 'int32[?]']
    both = fn.lowered({0: _batches(2), 1: _batches()})
    assert both is not None and _lowered_graph_ops(both) == set()


@pytest.mark.parametrize('comp', [rebatched, first_batch_sum])
def test_other_uses_are_refused(comp):
    assert _embedded(comp).lowered({0: _batches()}) is None


def test_a_returned_dataset_is_refused():
    @sh.tf_computation(SEQ)
    def identity(ds):
        return ds

    assert _embedded(identity).lowered({0: _batches()}) is None


def test_lower_graph_checks_its_placeholder():
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(total_by_reduce.to_building_block().graph.graph_def)
    with pytest.raises(NotLowerable, match='not a dataset placeholder'):
        lower_graph(gd, 'no_such_node:0', SourceSpec([tf.float32], None, False), [])


def test_recognize_reads_slices_batches_and_prefetch():
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True).prefetch(1)
    tb = recognize(ds, SEQ)
    assert tb is not None and tb.batch_size == 4 and tb.drop_remainder
    np.testing.assert_array_equal(tb.components[0], X)
    assert tb.num_elements == 1
    assert recognize(ds, SEQ) is tb  # kept on the dataset object
    rows = recognize(tf.data.Dataset.from_tensor_slices((X, Y)))
    assert rows is not None and rows.batch_size is None and rows.num_elements == 7
    # pipelines with other transformations are left to tf.data
    assert recognize(tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(3, seed=1).batch(2)) is None
    assert recognize(tf.data.Dataset.range(3)) is None
    assert recognize([1, 2]) is None


@pytest.mark.parametrize(
    'pipeline',
    [
        lambda d: d.batch(3).repeat(1),
        lambda d: d.batch(3).repeat(2),  # each epoch batched on its own
        lambda d: d.batch(3, drop_remainder=True).repeat(3),
        lambda d: d.repeat(2).batch(3),  # batches across the epochs
        lambda d: d.repeat(2).batch(3).repeat(2).prefetch(1),
        lambda d: d.repeat(3),
    ],
)
def test_recognize_reads_a_known_number_of_epochs(pipeline):
    """A user's epochs (``repeat(k)`` before or after ``batch``) are read from the ops,
    without running the dataset: the same elements in the same order."""
    ds = pipeline(tf.data.Dataset.from_tensor_slices((X, Y)))
    tb = recognize(ds, sh.SequenceType(sh.to_type(ds.element_spec)))
    assert tb is not None
    from simharness.executors.leaf.tensor_sequences import to_dataset

    ours = [[np.asarray(a).tolist() for a in e] for e in to_dataset(tb)]
    theirs = [[np.asarray(a).tolist() for a in e] for e in ds]
    assert ours == theirs and tb.num_elements == len(theirs)


def test_recognize_leaves_endless_or_empty_repeats_to_tf_data():
    ds = tf.data.Dataset.from_tensor_slices((X, Y))
    assert recognize(ds.repeat().batch(3)) is None  # forever: the caller's error names it
    assert recognize(ds.batch(3).repeat(0)) is None


def test_recognize_gives_dict_components_in_type_order():
    # tf.nest orders dict leaves by key (x, y); the element type says (y, x)
    t = sh.SequenceType(
        sh.to_type(
            __import__('collections').OrderedDict(
                y=sh.TensorType(tf.int32, [None]), x=sh.TensorType(tf.float32, [None, 2])
            )
        )
    )
    ds = tf.data.Dataset.from_tensor_slices({'y': Y, 'x': X}).batch(2)
    tb = recognize(ds, t)
    assert tb is not None
    assert [c.dtype for c in tb.components] == [tf.int32, tf.float32]
    # a dataset whose elements do not fit the type is left to the dataset path's error
    assert recognize(ds, SEQ) is None


def test_materialize_reads_small_finite_pipelines():
    from simharness.core.tf_sequences import materialize

    ds = tf.data.Dataset.from_tensor_slices((X, Y)).map(lambda x, y: (x + 1.0, y)).batch(3)
    tb = materialize(ds, SEQ)
    assert tb is not None and tb.batch_size == 3 and not tb.drop_remainder
    np.testing.assert_array_equal(tb.components[0], X + 1.0)
    rows = materialize(
        tf.data.Dataset.from_tensor_slices(X).map(lambda x: x * 2.0),
        sh.SequenceType(sh.TensorType(tf.float32, [2])),
    )
    assert rows is not None and rows.batch_size is None
    np.testing.assert_array_equal(rows.components[0], X * 2.0)
    # infinite, unknown size, empty, or batches of several sizes: left to tf.data
    assert materialize(ds.repeat(), SEQ) is None
    assert materialize(ds.filter(lambda x, y: True), SEQ) is None
    assert materialize(ds.take(0), SEQ) is None
    uneven = (
        tf.data.Dataset.from_tensor_slices((X, Y))
        .batch(2)
        .concatenate(tf.data.Dataset.from_tensor_slices((X, Y)).batch(3))
    )
    assert materialize(uneven, SEQ) is None
    assert materialize(ds, sh.SequenceType(sh.TensorType(tf.int32, [None]))) is None


def test_materialize_reads_batches_of_a_static_size_and_uneven_rows():
    """``batch(b, drop_remainder=True)`` gives batches of a static shape (ragged_batch keeps
    them dense, not ragged), also beside a leaf of open size; rows whose own shapes differ
    between batches (ragged below the rows) are read element by element."""
    from simharness.core.tf_sequences import materialize

    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(3, drop_remainder=True)
    tb = materialize(ds, SEQ)
    assert tb is not None and tb.batch_size == 3
    np.testing.assert_array_equal(tb.components[0], X[:6])
    np.testing.assert_array_equal(tb.components[1], Y[:6])
    mixed = ds.map(lambda x, y: (x, tf.boolean_mask(y, y >= 0)))  # y's batch size open
    tb = materialize(mixed, SEQ)
    assert tb is not None and tb.batch_size == 3
    np.testing.assert_array_equal(tb.components[1], Y[:6])
    grid = (
        tf.data.Dataset.from_tensor_slices(np.zeros([6, 3, 4], np.float32))
        .batch(2)
        .map(lambda x: x[:, : tf.shape(x)[0]])
    )  # rows [2, 4]: their shape is open in the spec
    seq = sh.SequenceType(sh.TensorType(tf.float32, [None, None, 4]))
    for _ in range(2):  # the failed trace is remembered for the spec
        tb = materialize(grid, seq)
        assert tb is not None and tb.batch_size == 2 and tb.components[0].shape == [6, 2, 4]


@pytest.mark.parametrize('rows, b, epochs', [(7, 3, 2), (2 * UNROLL_LIMIT + 3, 2, 3)])
def test_repeated_batches_are_read_as_passes_and_lowered(rows, b, epochs):
    """``.batch(b).repeat(k)`` (a ClientData's preprocessed dataset): read once into k passes
    (no batch spans two), lowered (unrolled or as a loop) to the bits tf.data gives."""
    from simharness.core.tf_sequences import materialize
    from simharness.executors.leaf.tensor_sequences import to_dataset

    x = np.arange(2 * rows, dtype=np.float32).reshape(rows, 2)
    y = np.arange(rows, dtype=np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(b).repeat(epochs)
    tb = materialize(ds, SEQ)
    assert tb is not None and (tb.batch_size, tb.passes) == (b, epochs)
    assert tb.num_elements == epochs * -(-rows // b)
    assert [len(e[1]) for e in to_dataset(tb)] == [len(e[1]) for e in ds]
    for comp in (total_by_reduce, total_with_break, filter_then_scan):
        fn = _embedded(comp)
        lowered = fn.lowered({0: tb})
        assert lowered is not None and _lowered_graph_ops(lowered) == set()
        got = lowered.call_flat(tb.components)[0]
        want = fn.call_flat([tf.data.experimental.to_variant(ds)])[0]
        assert got.numpy().tobytes() == want.numpy().tobytes()
    # passes of other batch sizes: left to tf.data
    assert (
        materialize(ds.concatenate(tf.data.Dataset.from_tensor_slices((x, y)).batch(b + 1)), SEQ)
        is None
    )


def test_a_dataset_computations_result_is_held_as_tensors():
    """A tf_computation returning a small dataset: the executor holds its elements
    (`TensorBatches`), so that a client update over it runs lowered."""
    import asyncio
    from simharness.executors.leaf.eager_tf import EagerTFExecutor

    @sh.tf_computation(np.int32)
    def make(n):
        return (
            tf.data.Dataset.from_tensor_slices((tf.reshape(tf.range(14.0), [7, 2]), tf.range(7)))
            .take(tf.cast(n, tf.int64))
            .batch(3)
            .repeat(2)
        )

    ex = EagerTFExecutor()
    fn = asyncio.run(ex.create_value(make))
    arg = asyncio.run(ex.create_value(np.int32(7), sh.TensorType(np.int32)))
    out = asyncio.run(ex.create_call(fn, arg)).internal
    assert isinstance(out, TensorBatches) and out.passes == 2 and out.num_elements == 6


@pytest.mark.parametrize('comp, batched', [(total_by_reduce, True), (total_of_a_large_body, False)])
def test_only_a_small_update_runs_batched_over_clients_alike(monkeypatch, comp, batched):
    """Clients whose sequences have the same shapes run in one batched call, unless the
    function is too large to unroll its loops (a recurrent model's update): its batched
    form would cost more to trace than the calls it saves. The same results either way."""
    calls = []
    real = EmbeddedFunction.call_batched

    def spy(self, mask, shared, stacked, n):
        calls.append(n)
        return real(self, mask, shared, stacked, n)

    monkeypatch.setattr(EmbeddedFunction, 'call_batched', spy)

    @sh.federated_computation(sh.type_at_clients(SEQ))
    def totals(datasets):
        return sh.federated_map(comp, datasets)

    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.int32)
    datasets = [tf.data.Dataset.from_tensor_slices((x + i, y)).batch(2) for i in range(3)]
    with sh.execution_context(sh.framework.local_executor_factory(clients_per_thread=3)):
        got = totals(datasets)
    assert calls == ([3] if batched else [])
    want = [float(comp(ds)) for ds in datasets]
    assert [float(g) for g in got] == want
