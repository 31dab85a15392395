"""Port of TFF's ``analytics/heavy_hitters/iblt/iblt_tff_test.py``.

Construction: TFF's type signature and every argument check (the invalid
values; of the valid ones only those that need no tracing of a computation:
each valid build traces two TF computations, ~2 s). Execution, with TFF's
expected values, condensed to one case per kind: the ground-truth test
(capacity 20, string_max_bytes 30, 6 repetitions, seed 1, secure sums of 32
bits, the postprocessor) on the thread stack and on two worker processes,
which must agree; string_max_bytes with max_heavy_hitters
(``test_computation_with_string_max_bytes``); and k-anonymity with
string_max_bytes without multi_contribution (the unique-counts
``k_3_max_string_len_2`` case). Left out, for time (each case builds and runs
a computation, ~3 s): the other parameterizations of these paths, the
``..._multibyte`` case (byte truncation of multi-byte words: test_chunkers.py
and test_iblt_lib.py), and TFF's batch_size 5 cases (TFF skips them,
b/368057405).
"""

import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.analytics.heavy_hitters.iblt import iblt_tff

DATA = [
    ['hello', 'hey', 'hi', 'hi', 'hi', '新年快乐'],
    ['hello', 'pumpkin', 'folks', 'I am on my way'],
    ['hello', 'world', '☺️😇', 'I am on my way'],
    ['hi how are', 'you :-)', 'I will be', 'there soon', 'I am on my way'],
    ['hey', 'hi', 'hi how are', 'you :-)', 'I will be', 'pumpkin'],
    ['hello', 'worm', '新年快乐', 'Seattle', 'Seattle'],
    ['hello', 'world', 'pumpkin', 'pumpkin'],
    ['way', 'I', 'I am on my way'],
    ['way', '☺️😇', 'worm', ':-)'],
    [':-)', 'there soon'],
]


def _postprocess(strings):
    return strings + tf.fill(tf.shape(strings), 'abcdefg')


def _datasets(data, batch_size=1):
    return [
        tf.data.Dataset.from_tensor_slices(d).batch(batch_size, drop_remainder=True) for d in data
    ]


def _results(output):
    words = [w.decode('utf-8', 'ignore') for w in output.heavy_hitters]
    return dict(
        zip(
            words,
            zip(output.heavy_hitters_unique_counts.tolist(), output.heavy_hitters_counts.tolist()),
        )
    )


def _execute(data, **kwargs):
    output = iblt_tff.build_iblt_computation(**kwargs)(_datasets(data, kwargs.get('batch_size', 1)))
    return _results(output), output


def test_default_construction_type_signature():
    computation = iblt_tff.build_iblt_computation()
    assert isinstance(computation, tff.Computation)
    expected = tff.FunctionType(
        tff.FederatedType(tff.SequenceType(tff.TensorType(np.str_, [None])), tff.CLIENTS),
        tff.FederatedType(
            iblt_tff.ServerOutput(
                clients=np.int32,
                heavy_hitters=tff.TensorType(np.str_, [None]),
                heavy_hitters_unique_counts=tff.TensorType(np.int64, [None]),
                heavy_hitters_counts=tff.TensorType(np.int64, [None]),
                num_not_decoded=np.int64,
                round_timestamp=np.int64,
            ),
            tff.SERVER,
        ),
    )
    assert computation.type_signature == expected


@pytest.mark.parametrize(
    'kwargs, match',
    [
        (dict(string_max_bytes=0), 'string_max_bytes'),
        (dict(string_max_bytes=-1), 'string_max_bytes'),
        (dict(repetitions=0), 'repetitions'),
        (dict(repetitions=2), 'repetitions'),
        (dict(max_heavy_hitters=0), 'max_heavy_hitters'),
        (dict(max_heavy_hitters=-1), 'max_heavy_hitters'),
        (dict(max_words_per_user=0), 'max_words_per_user'),
        (dict(max_words_per_user=-1), 'max_words_per_user'),
        (dict(k_anonymity=0), 'k_anonymity'),
        (dict(k_anonymity=-1), 'k_anonymity'),
        (dict(secure_sum_bitwidth=-1), 'secure_sum_bitwidth'),
        (dict(secure_sum_bitwidth=0), 'secure_sum_bitwidth'),
        (dict(secure_sum_bitwidth=63), 'secure_sum_bitwidth'),
        (dict(secure_sum_bitwidth=64), 'secure_sum_bitwidth'),
        (dict(batch_size=0), 'batch_size'),
        (dict(batch_size=-1), 'batch_size'),
    ],
)
def test_argument_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        iblt_tff.build_iblt_computation(**kwargs)


def test_computation_ground_truth_on_both_stacks(stack_registry):
    kwargs = dict(
        capacity=20,
        string_max_bytes=30,
        repetitions=6,
        seed=1,
        secure_sum_bitwidth=32,
        string_postprocessor=_postprocess,
    )
    computation = iblt_tff.build_iblt_computation(**kwargs)
    outputs = {}
    for name in ('local', 'process-2'):
        with stack_registry.open(name):
            outputs[name] = computation(_datasets(DATA))
    raw_counts = collections.Counter(itertools.chain.from_iterable(DATA))
    unique_counts = {s: sum(s in lst for lst in DATA) for s in raw_counts}
    expected = {s + 'abcdefg': (unique_counts[s], raw_counts[s]) for s in raw_counts}
    for output in outputs.values():
        assert output.clients == 10
        assert output.num_not_decoded == 0
        assert _results(output) == expected
    # TFF peels the cells in a random order (an unseeded RandomShuffleQueue); ours is seeded,
    # so the decoded strings come in the same order on every stack and every call.
    with stack_registry.open('local'):
        outputs['local, again'] = computation(_datasets(DATA))
    first = outputs['local']
    for output in outputs.values():
        assert output._fields == first._fields
        for field in first._fields:
            if field != 'round_timestamp':  # the clock's seconds, as in TFF
                np.testing.assert_array_equal(getattr(output, field), getattr(first, field))


def test_computation_with_string_max_bytes_and_max_heavy_hitters(tff_stack):
    results, _ = _execute(
        DATA,
        capacity=100,
        string_max_bytes=5,
        max_words_per_user=10,
        max_heavy_hitters=4,
        batch_size=1,
    )
    assert results == {'hello': (5, 5), 'pumpk': (3, 4), 'hi': (2, 4), 'I am ': (4, 4)}


def test_computation_unique_counts_with_k_anonymity_and_string_max_bytes(tff_stack):
    # SecAggIbltUniqueCountsTffTest's ``k_3_max_string_len_2`` (multi_contribution=False).
    results, _ = _execute(
        DATA,
        capacity=100,
        string_max_bytes=2,
        max_words_per_user=10,
        k_anonymity=3,
        batch_size=1,
        multi_contribution=False,
    )
    assert results == {'he': (6, 6), 'hi': (3, 3), 'I ': (5, 5), 'pu': (3, 3), 'wo': (4, 4)}
