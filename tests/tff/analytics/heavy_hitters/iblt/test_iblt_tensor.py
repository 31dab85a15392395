"""Port of TFF's ``analytics/heavy_hitters/iblt/iblt_tensor_test.py``.

TFF's cases and expected values, condensed (each decode traces a graph,
~2 s, and the suite has a time budget): encode/decode keeps ``multilingual``
(int64-max values, decoded by `IbltTensorDecoder.get_freq_estimates`) and
``rank_2_value_shape`` (duplicate keys summed, by `decode_iblt_tensor_tf`).
Left out: ``trim_strings_above_max_length``, ``drop_strings_above_max_length``
and ``coupled_hash`` (their paths are in test_iblt_lib.py),
``duplicate_keys`` and ``rank_3_value_shape`` (covered by
``rank_2_value_shape``), ``empty`` (value_shape ``()``: the plain IBLT
decoding of test_iblt_lib.py, plus an empty values tensor), and TFF's
graph-mode reruns. The input checks are all TFF's.
"""

import pytest
import tensorflow as tf

from simharness.analytics.heavy_hitters.iblt import iblt_tensor

_MAX = tf.int64.max


def _decoded(table, values, value_shape, string_max_bytes=12):
    strings, counts, tensor_values, num_not_decoded = iblt_tensor.decode_iblt_tensor_tf(
        iblt=table,
        iblt_values=values,
        capacity=10,
        string_max_bytes=string_max_bytes,
        value_shape=value_shape,
        repetitions=3,
        seed=0,
    )
    strings = [s.decode('utf-8', 'ignore') for s in strings.numpy().tolist()]
    string_counts = dict(zip(strings, counts.numpy().tolist()))
    if num_not_decoded.numpy():
        string_counts[None] = num_not_decoded.numpy()
    return string_counts, dict(zip(strings, tensor_values.numpy().tolist()))


@pytest.mark.parametrize(
    'value_shape, strings, values, out_strings, out_values, out_counts, kw',
    [
        (
            (3,),
            ['201', 'seattle', 'heavy', 'hitters', 'क', '☺️'],
            [[3, 2, 1], [7, 3, 9], [_MAX, 0, 0], [_MAX, _MAX, 0], [0, _MAX, 0], [1, 2, 19]],
            ['201', 'seattle', 'heavy', 'hitters', 'क', '☺️'],
            [[3, 2, 1], [7, 3, 9], [_MAX, 0, 0], [_MAX, _MAX, 0], [0, _MAX, 0], [1, 2, 19]],
            [1] * 6,
            {},
        ),
        (
            (3, 2),
            ['201', 'seattle', '201'],
            [[[3, 5], [2, 2], [1, 7]], [[7, 7], [3, 3], [9, 9]], [[1, 1], [1, 1], [0, 0]]],
            ['201', 'seattle'],
            [[[4, 6], [3, 3], [1, 7]], [[7, 7], [3, 3], [9, 9]]],
            [2, 1],
            {},
        ),
    ],
    ids=['multilingual', 'rank_2_value_shape'],
)
def test_iblt_tensor_encode_and_decode(
    value_shape, strings, values, out_strings, out_values, out_counts, kw
):
    string_max_bytes = kw.get('string_max_bytes', 12)
    encoder = iblt_tensor.IbltTensorEncoder(
        value_shape,
        capacity=10,
        string_max_bytes=string_max_bytes,
        repetitions=3,
        seed=0,
        drop_strings_above_max_length=kw.get('drop_strings_above_max_length', False),
    )
    table, table_values = encoder.compute_iblt(
        tf.constant(strings), input_values=tf.constant(values, tf.int64)
    )
    if value_shape == (3,):
        decoder = iblt_tensor.IbltTensorDecoder(
            iblt=table,
            iblt_values=table_values,
            value_shape=value_shape,
            capacity=10,
            string_max_bytes=string_max_bytes,
            repetitions=3,
            seed=0,
        )
        counts, tensor_values = decoder.get_freq_estimates()
    else:
        counts, tensor_values = _decoded(table, table_values, value_shape, string_max_bytes)
    assert counts == dict(zip(out_strings, out_counts))
    assert tensor_values == dict(zip(out_strings, out_values))


@pytest.mark.parametrize(
    'value_shape, strings, values',
    [
        ((1,), [['rank', '2', 'tensor']], [0, 0]),
        ((1,), ['some', 'strings'], [1, 1]),
        ((2,), ['some', 'strings'], [[1], [1]]),
        ((2,), ['some', 'strings'], [[[1, 3]], [[1, 1]]]),
        ((2,), ['some', 'strings'], [[1, 1]]),
        ((2, 3), ['some', 'strings'], [[[1, 4], [2, 4]], [[2, 3], [4, 2]]]),
    ],
)
def test_iblt_input_checks(value_shape, strings, values):
    encoder = iblt_tensor.IbltTensorEncoder(
        value_shape=value_shape, capacity=10, string_max_bytes=12, seed=0
    )
    with pytest.raises(ValueError):
        encoder.compute_iblt(tf.constant(strings), tf.constant(values, tf.int64))
