"""Port of TFF's ``tensorflow_federated/python/learning/loop_builder_test.py``.

One case differs on purpose: TFF's ``test_dataset_reduce_op_not_present_in_iterator``
asserts the DATASET_ITERATOR loop (``for batch in iter(dataset)``) has no
``ReduceDataset``; ours writes ``for batch in dataset``, which autograph makes a
``ReduceDataset`` so that the runtime can lower it to a tensor loop (an explicit
iterator cannot be). `test_iterator_loop_is_a_dataset_reduction` checks that.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from simharness.learning import loop_builder

DATASET_REDUCE_OP = 'ReduceDataset'


def _op_types(graph_def):
    nodes = itertools.chain(graph_def.node, *[f.node_def for f in graph_def.library.function])
    return [n.op for n in nodes]


@pytest.mark.parametrize(
    'implementation, reduce_fn',
    [
        (loop_builder.LoopImplementation.DATASET_ITERATOR, loop_builder._for_iter_dataset_fn),
        (loop_builder.LoopImplementation.DATASET_REDUCE, loop_builder._dataset_reduce_fn),
    ],
    ids=['dataset_iteration', 'dataset_reduce'],
)
def test_build_training_loop(implementation, reduce_fn):
    assert loop_builder.build_training_loop(implementation) is reduce_fn


def test_unknown_implementation_raises():
    with pytest.raises(NotImplementedError):
        loop_builder.build_training_loop('nope')


@pytest.mark.parametrize(
    'reduce_fn',
    [loop_builder._dataset_reduce_fn, loop_builder._for_iter_dataset_fn],
    ids=['dataset_reduce', 'dataset_iteration'],
)
def test_reduction_math_is_correct(reduce_fn):
    ds = tf.data.Dataset.range(10, output_type=tf.int32)
    assert reduce_fn(reduce_fn=lambda x, y: x + y, dataset=ds) == np.int32(45)
    ds = tf.data.Dataset.range(10, output_type=tf.float32).map(lambda x: 0.1 * x)
    total_cnt, total_sum = reduce_fn(
        reduce_fn=lambda x, y: (x[0] + 1, x[1] + y),
        dataset=ds,
        initial_state_fn=lambda: (tf.constant(0.0), tf.constant(0.1)),
    )
    assert total_cnt == np.float32(10)
    assert total_sum == np.float32(4.6)


@pytest.mark.parametrize(
    'reduce_fn',
    [loop_builder._dataset_reduce_fn, loop_builder._for_iter_dataset_fn],
    ids=['dataset_reduce', 'dataset_iteration'],
)
def test_iterator_loop_is_a_dataset_reduction(reduce_fn):
    with tf.Graph().as_default() as graph:
        ds = tf.data.Dataset.range(10, output_type=tf.int32)
        tf.function(reduce_fn)(reduce_fn=lambda x, y: x + y, dataset=ds)
        ops = _op_types(graph.as_graph_def())
    assert DATASET_REDUCE_OP in ops
    assert 'MakeIterator' not in ops and 'IteratorGetNext' not in ops
