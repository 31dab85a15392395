"""`TensorBatches`: in-memory client datasets as plain data across the seam, checked on arrival."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core.sequences import TensorBatches
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.runtime import codec

ELEM = sh.to_type((sh.TensorType(tf.float32, [None, 3]), sh.TensorType(tf.int64, [None])))
SEQ = sh.SequenceType(ELEM)


def _tb(rows=5, b=2, drop=False):
    return TensorBatches(
        [np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), np.arange(rows, dtype=np.int64)],
        b,
        drop,
        ELEM,
    )


def test_round_trips_through_the_codec_as_arrays():
    header, buffers = codec.encode([_tb(300)])
    (back,) = codec.decode(header, buffers)
    assert isinstance(back, TensorBatches)
    assert back.batch_size == 2 and back.drop_remainder is False and back.element_type == ELEM
    np.testing.assert_array_equal(back.components[0], _tb(300).components[0])
    assert back.num_elements == 150
    assert b'pickle' not in header


def test_the_executor_embeds_it_as_the_dataset_it_stands_for():
    ex = EagerTFExecutor()
    v = asyncio.run(ex.create_value(_tb(5, 2), SEQ))
    ds = v.internal_representation
    assert isinstance(ds, tf.data.Dataset)
    assert [len(y) for _, y in ds] == [2, 2, 1]
    drop = asyncio.run(ex.create_value(_tb(5, 2, True), SEQ)).internal_representation
    assert [len(y) for _, y in drop] == [2, 2]


@pytest.mark.parametrize(
    'bad, error, match',
    [
        (
            TensorBatches([np.zeros((4, 3), np.float32)], 2, False, ELEM),
            SimharnessTypeError,
            'does not hold the components',
        ),
        (
            TensorBatches([np.zeros((4, 2), np.float32), np.zeros(4, np.int64)], 2, False, ELEM),
            SimharnessTypeError,
            r'shape \(4, 2\) is not assignable to float32\[\?,3\]',
        ),
        (
            TensorBatches([np.zeros((4, 3), np.float32), np.zeros(3, np.int64)], 2, False, ELEM),
            SimharnessValueError,
            'have 4 and 3 rows',
        ),
        (
            TensorBatches([np.zeros((4, 3), np.float32), np.zeros(4, np.int64)], 0, False, ELEM),
            SimharnessValueError,
            'batch size 0',
        ),
        (
            TensorBatches([np.zeros((4, 3), np.float32), np.zeros(4, np.int64)], 2, 'yes', ELEM),
            SimharnessTypeError,
            'drop_remainder',
        ),
    ],
)
def test_malformed_components_from_a_peer_get_clear_errors(bad, error, match):
    ex = EagerTFExecutor()
    with pytest.raises(error, match=match):
        asyncio.run(ex.create_value(bad, SEQ))


def test_passes_cross_the_codec_and_give_per_pass_batches():
    """``passes`` (``.batch(b).repeat(k)`` read once): kept across the seam; the dataset it
    stands for batches each pass on its own."""
    tb = TensorBatches(
        [np.arange(30, dtype=np.float32).reshape(10, 3), np.arange(10)], 2, False, ELEM, 2
    )
    assert tb.num_elements == 6
    header, buffers = codec.encode([tb])
    (back,) = codec.decode(header, buffers)
    assert back.passes == 2 and back.num_elements == 6
    ds = asyncio.run(EagerTFExecutor().create_value(back, SEQ)).internal_representation
    assert [list(y.numpy()) for _, y in ds] == [[0, 1], [2, 3], [4], [5, 6], [7, 8], [9]]
    with pytest.raises(SimharnessValueError, match='3 passes'):
        asyncio.run(
            EagerTFExecutor().create_value(TensorBatches(tb.components, 2, False, ELEM, 3), SEQ)
        )
