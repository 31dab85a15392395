"""TFF's learning/metrics/counters_test.py, renamed (Keras 3 metrics). Left out: none."""

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

C = tff.learning.metrics

NAMED_LABEL_TESTS = {
    'single_label': (np.zeros([10]), np.zeros([5, 1])),
    'multi_label_list': ([np.zeros([10])] * 2, [np.zeros([5, 1])] * 2),
    'multi_label_dict': (
        {'x1': np.zeros([10]), 'y1': np.zeros([10])},
        {'x2': np.zeros([5, 1]), 'y2': np.zeros([5, 1])},
    ),
}


@pytest.mark.parametrize(
    'cls, name', [(C.NumExamplesCounter, 'num_examples'), (C.NumBatchesCounter, 'num_batches')]
)
def test_construct(cls, name):
    m = cls()
    assert m.name == name and tf.as_dtype(m.dtype) == tf.int64
    assert len(m.variables) == 1 and int(m.total) == 0
    assert cls(name + '2').name == name + '2'


@pytest.mark.parametrize(
    'batch1, batch2', list(NAMED_LABEL_TESTS.values()), ids=list(NAMED_LABEL_TESTS)
)
def test_num_examples_update(batch1, batch2):
    m = C.NumExamplesCounter()
    assert int(m(batch1, batch1)) == 10 and int(m.total) == 10
    m.update_state(batch2, batch2)
    assert int(m.total) == 15
    m.update_state(batch2, batch2, sample_weight=np.zeros([5]))  # weights are ignored
    assert int(m.total) == 20


def test_num_examples_computes_shape_of_first_input_arg():
    m = C.NumExamplesCounter()
    assert int(m(tf.zeros([10, 1]), tf.zeros([15]))) == 10
    m.update_state(tf.zeros([5, 1]), tf.zeros([700]))
    assert int(m.total) == 15


def test_num_examples_refuses_python_numbers():
    with pytest.raises(ValueError, match='numpy.ndarray'):
        C.NumExamplesCounter().update_state([1.0, 2.0])


@pytest.mark.parametrize(
    'batch1, batch2', list(NAMED_LABEL_TESTS.values()), ids=list(NAMED_LABEL_TESTS)
)
def test_num_batches_update(batch1, batch2):
    m = C.NumBatchesCounter()
    assert int(m(batch1, batch1)) == 1 and int(m.total) == 1
    m.update_state(batch2, batch2, sample_weight=np.zeros([5]))
    assert int(m.total) == 2


@pytest.mark.parametrize('cls', [C.NumExamplesCounter, C.NumBatchesCounter])
def test_reset_to_zero(cls):
    m = cls()
    assert int(m(tf.zeros([10, 1]), tf.zeros([10]))) > 0
    m.reset_state()
    assert int(m.total) == 0
