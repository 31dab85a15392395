"""Port of TFF's ``tensorflow_federated/python/program/tensorboard_release_manager_test.py``.

No case left out except materializable value references and `Serializable`
values (not program values here). Added: the summaries reach the event file.
"""

import asyncio
import collections
import shutil
from unittest import mock

import attrs
import numpy as np
import pytest
import tensorflow as tf

from simharness.program import tensorboard_release_manager

Manager = tensorboard_release_manager.TensorBoardReleaseManager
NT1 = collections.namedtuple('NT1', ['a', 'b', 'c'])
NT2 = collections.namedtuple('NT2', ['a'])
NT3 = collections.namedtuple('NT3', ['x', 'y'])


@attrs.define
class SomeAttrs:
    a: int
    b: int


def test_creates_new_dir(tmp_path):
    for d in (str(tmp_path / 'a'), tmp_path / 'b'):
        Manager(d)
        assert (tmp_path / 'a').is_dir()
    assert (tmp_path / 'b').is_dir()


def test_raises_value_error_with_summary_dir_empty():
    with pytest.raises(ValueError):
        Manager('')


SCALARS = [
    ('bool', True, [('', True)]),
    ('int', 1, [('', 1)]),
    ('numpy_int', np.int32(1), [('', np.int32(1))]),
    ('list', [True, 1, 'abc'], [('0', True), ('1', 1)]),
    ('list_nested', [[True, 1, 'abc'], [5]], [('0/0', True), ('0/1', 1), ('1/0', 5)]),
    ('dict_ordered', {'a': True, 'b': 1, 'c': 'abc'}, [('a', True), ('b', 1)]),
    ('dict_unordered', {'c': True, 'b': 1, 'a': 'abc'}, [('b', 1), ('c', True)]),
    (
        'dict_nested',
        {'x': {'a': True, 'b': 1, 'c': 'abc'}, 'y': {'a': 5}},
        [('x/a', True), ('x/b', 1), ('y/a', 5)],
    ),
    ('named_tuple', NT1(a=True, b=1, c='abc'), [('a', True), ('b', 1)]),
    (
        'named_tuple_nested',
        NT3(x=NT1(a=True, b=1, c='abc'), y=NT2(a=5)),
        [('x/a', True), ('x/b', 1), ('y/a', 5)],
    ),
]


@pytest.mark.parametrize('name, value, expected_calls', SCALARS, ids=[c[0] for c in SCALARS])
def test_writes_value_scalar(tmp_path, name, value, expected_calls):
    mngr = Manager(tmp_path)
    with mock.patch.object(tf.summary, 'scalar') as mock_scalar:
        asyncio.run(mngr.release(value, key=1))
    assert len(mock_scalar.mock_calls) == len(expected_calls)
    for call, (want_name, want_value) in zip(mock_scalar.mock_calls, expected_calls):
        _, args, kwargs = call
        assert args == (want_name, want_value) and type(args[1]) is type(want_value)
        assert kwargs == {'step': 1}


def test_writes_value_histogram(tmp_path):
    mngr = Manager(tmp_path)
    with mock.patch.object(tf.summary, 'histogram') as mock_histogram:
        asyncio.run(mngr.release(np.array([1] * 3, np.int32), key=1))
    (call,) = mock_histogram.mock_calls
    _, (name, value), kwargs = call
    assert name == '' and value.tolist() == [1, 1, 1] and kwargs == {'step': 1}


def test_writes_value_scalar_and_histogram(tmp_path):
    mngr = Manager(tmp_path)
    with (
        mock.patch.object(tf.summary, 'scalar') as mock_scalar,
        mock.patch.object(tf.summary, 'histogram') as mock_histogram,
    ):
        asyncio.run(mngr.release([1, tf.constant([1] * 3)], key=1))
    mock_scalar.assert_called_once_with('0', 1, step=1)
    (call,) = mock_histogram.mock_calls
    _, (name, value), kwargs = call
    assert name == '1' and value.numpy().tolist() == [1, 1, 1] and kwargs == {'step': 1}


@pytest.mark.parametrize(
    'value',
    [None, 'abc', SomeAttrs(1, 2), [], {}],
    ids=['none', 'str', 'attrs', 'list_empty', 'dict_empty'],
)
def test_does_not_write_value(tmp_path, value):
    mngr = Manager(tmp_path)
    with (
        mock.patch.object(tf.summary, 'scalar') as mock_scalar,
        mock.patch.object(tf.summary, 'histogram') as mock_histogram,
    ):
        asyncio.run(mngr.release(value, key=1))
    mock_scalar.assert_not_called()
    mock_histogram.assert_not_called()


def test_summaries_reach_the_event_file(tmp_path):
    mngr = Manager(tmp_path)
    asyncio.run(mngr.release({'loss': np.float32(0.5), 'w': np.ones(3, np.float32)}, key=7))
    events = list(tmp_path.glob('events.out.tfevents.*'))
    assert len(events) == 1
    tags = set()
    for record in tf.data.TFRecordDataset(str(events[0])):
        event = tf.compat.v1.Event.FromString(record.numpy())
        if event.step == 7:
            tags.update(v.tag for v in event.summary.value)
    assert tags == {'loss', 'w'}
    shutil.rmtree(tmp_path)
