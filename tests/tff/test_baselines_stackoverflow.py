"""Port of TFF's ``.../simulation/baselines/stackoverflow/`` tests
(``word_prediction_tasks_test.py``, ``word_prediction_models_test.py``,
``word_prediction_preprocessing_test.py``, ``tag_prediction_tasks_test.py``,
``tag_prediction_preprocessing_test.py``).

No case left out. ``test_preprocessed_test_dataset_can_yield_batches`` keeps TFF's
expected ``InvalidArgumentError`` (TFF's b/243523845: the same error here) and checks
that `get_centralized_test_data` yields batches. ``test_shared_embedding_returns_dense_gradient``
runs eagerly (TFF builds a v1 Session over a Keras 2 graph). Added: both tasks reading
tiny files in TFF's formats from ``cache_dir`` (the word and tag counts too) and their
error when a file is absent.
"""

import collections
import json

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.baselines import baseline_task, client_spec
from simharness.simulation.baselines.stackoverflow import (
    tag_prediction_preprocessing,
    tag_prediction_tasks,
    word_prediction_models,
    word_prediction_preprocessing,
    word_prediction_tasks,
)
from tests.tff.simulation.datasets_files import write_tff_sqlite

TRAIN_SPEC = client_spec.ClientSpec(
    num_epochs=2, batch_size=10, max_elements=3, shuffle_buffer_size=5
)
EVAL_SPEC = client_spec.ClientSpec(
    num_epochs=1, batch_size=2, max_elements=5, shuffle_buffer_size=10
)


def _length(ds):
    return int(ds.reduce(0, lambda x, _: x + 1))


def _ceil(a, b):
    return -(-a // b)


# --- word_prediction_tasks_test.py --------------------------------------------------------


@pytest.mark.parametrize('eval_spec', [EVAL_SPEC, None])
def test_word_task_constructs(eval_spec):
    task = word_prediction_tasks.create_word_prediction_task(
        TRAIN_SPEC, vocab_size=10, eval_client_spec=eval_spec, use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('sequence_length', [1, 8, 10, 50])
def test_word_task_constructs_with_different_sequence_lengths(sequence_length):
    task = word_prediction_tasks.create_word_prediction_task(
        TRAIN_SPEC, vocab_size=10, sequence_length=sequence_length, use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('sequence_length', [0, -1, -5])
def test_word_task_raises_on_bad_sequence_lengths(sequence_length):
    with pytest.raises(ValueError):
        word_prediction_tasks.create_word_prediction_task(
            TRAIN_SPEC, vocab_size=10, sequence_length=sequence_length, use_synthetic_data=True
        )


@pytest.mark.parametrize('vocab_size', [1, 8, 10, 50])
def test_word_task_constructs_with_different_vocab_sizes(vocab_size):
    task = word_prediction_tasks.create_word_prediction_task(
        TRAIN_SPEC, vocab_size=vocab_size, use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('vocab_size', [0, -1, -5])
def test_word_task_raises_on_bad_vocab_size(vocab_size):
    with pytest.raises(ValueError):
        word_prediction_tasks.create_word_prediction_task(
            TRAIN_SPEC, vocab_size=vocab_size, use_synthetic_data=True
        )


@pytest.mark.slow  # ~2.5 s: the 670-unit LSTM run on a batch
def test_word_model_is_compatible_with_preprocessed_data():
    task = word_prediction_tasks.create_word_prediction_task(
        client_spec.ClientSpec(num_epochs=1, batch_size=10), use_synthetic_data=True
    )
    sample_batch = next(iter(task.datasets.get_centralized_test_data()))
    output = task.model_fn().forward_pass(sample_batch)
    assert np.isfinite(float(output.loss))


# --- word_prediction_models_test.py -------------------------------------------------------


@pytest.mark.parametrize(
    'kwargs, name',
    [
        (dict(vocab_size=-2), 'vocab_size'),
        (dict(vocab_size=3, embedding_size=-3), 'embedding_size'),
        (dict(vocab_size=3, num_lstm_layers=-2), 'num_lstm_layers'),
        (dict(vocab_size=3, lstm_size=0), 'lstm_size'),
    ],
)
def test_word_model_nonpositive_sizes_raise(kwargs, name):
    with pytest.raises(ValueError, match=f'{name} must be a positive integer'):
        word_prediction_models.create_recurrent_model(**kwargs)


@pytest.mark.parametrize('vocab_size', [1, 801, 10000])
def test_output_shape_matches_vocab_size(vocab_size):
    model = word_prediction_models.create_recurrent_model(vocab_size=vocab_size)
    assert tuple(model.output_shape) == (None, None, vocab_size)


@pytest.mark.parametrize(
    'num_lstm_layers',
    [1, pytest.param(3, marks=pytest.mark.slow), pytest.param(7, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize('shared_embedding', [True, False])
def test_num_layers(num_lstm_layers, shared_embedding):
    model = word_prediction_models.create_recurrent_model(
        vocab_size=3, num_lstm_layers=num_lstm_layers, shared_embedding=shared_embedding
    )
    # Input, embedding, num_lstm_layers (LSTM, Dense) pairs, the output layer.
    assert len(model.layers) == 2 + 2 * num_lstm_layers + 1


def test_shared_embedding_matches_input_and_output_weights():
    model = word_prediction_models.create_recurrent_model(vocab_size=3, shared_embedding=True)
    embedding, output = model.layers[1].weights, model.layers[-1].weights
    assert len(embedding) == len(output) == 1
    assert np.allclose(embedding[0].numpy(), output[0].numpy())
    # One shared variable, not two copies.
    assert len(model.trainable_variables) == len({id(v) for v in model.trainable_variables})


@pytest.mark.slow  # ~1.6 s
def test_shared_embedding_returns_dense_gradient():
    model = word_prediction_models.create_recurrent_model(vocab_size=3, shared_embedding=True)
    batch = tf.ones((2, 20), dtype=tf.int32)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(y_true=batch, y_pred=model(batch, training=True))
    grad = tf.convert_to_tensor(tape.gradient(loss, model.trainable_variables[0]))
    assert bool(tf.reduce_all(tf.norm(grad, axis=1) > 0.0))


# --- word_prediction_preprocessing_test.py ------------------------------------------------

WORD_TEST_DATA = collections.OrderedDict(
    creation_date=['unused date'],
    score=[tf.constant(0, dtype=tf.int64)],
    tags=['unused test tag'],
    title=['unused title'],
    tokens=['one must imagine'],
    type=['unused type'],
)


def test_split_input_returns_expected_result():
    x, y = word_prediction_preprocessing.split_input_target(
        tf.constant([[0, 1, 2, 3, 4]], dtype=tf.int64)
    )
    assert x.numpy().tolist() == [[0, 1, 2, 3]] and y.numpy().tolist() == [[1, 2, 3, 4]]


def test_ids_fn_truncates_on_input_longer_than_sequence_length():
    vocab = ['A', 'B', 'C']
    bos = word_prediction_preprocessing.get_special_tokens(len(vocab)).beginning_of_sentence
    to_ids = word_prediction_preprocessing.build_to_ids_fn(vocab, 1)
    assert to_ids({'tokens': 'A B C'}).numpy().tolist() == [bos, 1]


def test_build_to_ids_fn_embeds_all_vocab_and_pads():
    vocab = ['A', 'B', 'C']
    special = word_prediction_preprocessing.get_special_tokens(len(vocab))
    bos, eos, pad = special.beginning_of_sentence, special.end_of_sentence, special.padding
    ids = word_prediction_preprocessing.build_to_ids_fn(vocab, 5)({'tokens': 'A B C'})
    assert ids.numpy().tolist() == [bos, 1, 2, 3, eos]
    batched = tf.data.Dataset.from_tensor_slices([ids]).padded_batch(1, padded_shapes=[6])
    assert next(iter(batched)).numpy().tolist() == [[bos, 1, 2, 3, eos, pad]]


def test_out_of_vocab_tokens_are_correct():
    vocab = ['A', 'B', 'C']
    to_ids = word_prediction_preprocessing.build_to_ids_fn(vocab, 5, num_out_of_vocab_buckets=2)
    oov = word_prediction_preprocessing.get_special_tokens(
        len(vocab), num_out_of_vocab_buckets=2
    ).out_of_vocab
    assert len(oov) == 2
    assert to_ids({'tokens': 'A B D'}).numpy()[3] in oov


def test_batch_and_split():
    ds = tf.data.Dataset.from_tensor_slices(tf.constant([[0, 1, 2, 3, 4]], dtype=tf.int64))
    batched = word_prediction_preprocessing.batch_and_split(ds, sequence_length=6, batch_size=1)
    spec = tf.TensorSpec([None, 6], dtype=tf.int64)
    assert batched.element_spec == (spec, spec)
    elements = [(x.numpy().tolist(), y.numpy().tolist()) for x, y in batched]
    assert elements == [([[0, 1, 2, 3, 4, 0]], [[1, 2, 3, 4, 0, 0]])]


def test_word_preprocess_fn_with_empty_vocab_raises():
    with pytest.raises(ValueError, match='vocab must be non-empty'):
        word_prediction_preprocessing.create_preprocess_fn(
            client_spec.ClientSpec(num_epochs=1, batch_size=1), vocab=[], sequence_length=10
        )


def test_word_nonpositive_sequence_length_raises():
    with pytest.raises(ValueError, match='sequence_length must be a positive integer'):
        word_prediction_preprocessing.create_preprocess_fn(
            client_spec.ClientSpec(num_epochs=1, batch_size=1), vocab=['A'], sequence_length=0
        )


@pytest.mark.parametrize('buckets', [0, -1, -2])
def test_nonpositive_num_out_of_vocab_buckets_raises(buckets):
    with pytest.raises(ValueError, match='num_out_of_vocab_buckets must be a positive integer'):
        word_prediction_preprocessing.create_preprocess_fn(
            client_spec.ClientSpec(num_epochs=1, batch_size=1),
            vocab=['A'],
            sequence_length=10,
            num_out_of_vocab_buckets=buckets,
        )


def _word_preprocess(sequence_length, buckets):
    return word_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=1, batch_size=32, max_elements=100),
        sequence_length=sequence_length,
        vocab=['one', 'must'],
        num_out_of_vocab_buckets=buckets,
    )(tf.data.Dataset.from_tensor_slices(WORD_TEST_DATA))


@pytest.mark.parametrize('sequence_length, buckets', [(1, 1), (4, 2), (100, 3)])
def test_word_preprocess_fn_returns_correct_dataset_element_spec(sequence_length, buckets):
    spec = tf.TensorSpec(shape=[None, sequence_length], dtype=tf.int64)
    assert _word_preprocess(sequence_length, buckets).element_spec == (spec, spec)


def test_word_preprocess_fn_returns_correct_sequence_with_1_out_of_vocab_bucket():
    # bos = len(vocab) + 2, eos = len(vocab) + 3, pad 0, oov len(vocab) + 1.
    x, _ = next(iter(_word_preprocess(6, 1)))
    assert x.numpy().tolist() == [[4, 1, 2, 3, 5, 0]]


def test_word_preprocess_fn_returns_correct_sequence_with_3_out_of_vocab_buckets():
    x, _ = next(iter(_word_preprocess(6, 3)))
    row = x.numpy()[0].tolist()
    assert row[:3] == [6, 1, 2] and row[3] in [3, 4, 5] and row[4:] == [7, 0]


@pytest.mark.parametrize(
    'num_epochs, batch_size', [(1, 1), (4, 2), (9, 3), (12, 1), (3, 5), (7, 2)]
)
def test_word_ds_length_is_ceil_num_epochs_over_batch_size(num_epochs, batch_size):
    preprocess_fn = word_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=num_epochs, batch_size=batch_size),
        vocab=['A'],
        sequence_length=10,
    )
    assert _length(preprocess_fn(tf.data.Dataset.from_tensor_slices(WORD_TEST_DATA))) == _ceil(
        num_epochs, batch_size
    )


@pytest.mark.parametrize('max_elements', [1, 3, 7, 11, 18])
def test_word_ds_length_with_max_elements(max_elements):
    preprocess_fn = word_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=10, batch_size=1, max_elements=max_elements), vocab=['A']
    )
    assert _length(preprocess_fn(tf.data.Dataset.from_tensor_slices(WORD_TEST_DATA))) == min(
        10, max_elements
    )


# --- tag_prediction_tasks_test.py ---------------------------------------------------------


@pytest.mark.parametrize('input_size, output_size', [(2, 5), (1, 10), (7, 3), (100, 1)])
def test_constructs_keras_model_with_correct_dimensions(input_size, output_size):
    model = tag_prediction_tasks._build_logistic_regression_model(
        input_size=input_size, output_size=output_size
    )
    assert isinstance(model, tf.keras.Model)
    assert [tuple(w.shape) for w in model.weights] == [(input_size, output_size), (output_size,)]


@pytest.mark.parametrize('eval_spec', [EVAL_SPEC, None])
def test_tag_task_constructs(eval_spec):
    task = tag_prediction_tasks.create_tag_prediction_task(
        TRAIN_SPEC, eval_client_spec=eval_spec, use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('kwarg', ['word_vocab_size', 'tag_vocab_size'])
@pytest.mark.parametrize('size', [1, 8, 10, 50])
def test_tag_task_constructs_with_different_vocab_sizes(kwarg, size):
    task = tag_prediction_tasks.create_tag_prediction_task(
        TRAIN_SPEC, use_synthetic_data=True, **{kwarg: size}
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('kwarg', ['word_vocab_size', 'tag_vocab_size'])
@pytest.mark.parametrize('size', [0, -1, -5])
def test_tag_task_raises_on_bad_vocab_size(kwarg, size):
    with pytest.raises(ValueError):
        tag_prediction_tasks.create_tag_prediction_task(
            TRAIN_SPEC, use_synthetic_data=True, **{kwarg: size}
        )


@pytest.mark.slow  # ~2 s
def test_preprocessed_test_dataset_can_yield_batches():
    task = tag_prediction_tasks.create_tag_prediction_task(
        TRAIN_SPEC, eval_client_spec=EVAL_SPEC, use_synthetic_data=True
    )
    preprocessed = task.datasets.test_data.preprocess(task.datasets.eval_preprocess_fn)
    # As TFF (its b/243523845): 'batch_size must be greater than zero' from the flat map.
    with pytest.raises(tf.errors.InvalidArgumentError):
        next(iter(preprocessed.create_tf_dataset_from_all_clients()))
    # The centralized test data (joined first, then preprocessed) does yield batches.
    x, y = next(iter(task.datasets.get_centralized_test_data()))
    assert x.shape[0] == y.shape[0] and x.shape[0] <= 2


# --- tag_prediction_preprocessing_test.py -------------------------------------------------


@pytest.mark.parametrize(
    'word_vocab, tokens, title, expected',
    [
        (['A', 'B', 'C'], 'A B C', '', [1 / 3, 1 / 3, 1 / 3]),
        (['A', 'B', 'C'], 'A B C A A C B B B', '', [1 / 3, 4 / 9, 2 / 9]),
        (['A', 'B'], 'A B C', '', [1 / 2, 1 / 2]),
        (['A', 'B'], 'A B C A C C A B', '', [3 / 5, 2 / 5]),
        (['A', 'B'], 'C D E F G', '', [0, 0]),
        (['A', 'B', 'C'], 'A B C', 'A B', [2 / 5, 2 / 5, 1 / 5]),
    ],
)
def test_word_tokens_to_ids(word_vocab, tokens, title, expected):
    to_ids = tag_prediction_preprocessing.build_to_ids_fn(word_vocab, ['D', 'E', 'F'])
    words, _ = to_ids({'tokens': tokens, 'title': title, 'tags': ''})
    assert np.allclose(words.numpy(), expected)


@pytest.mark.parametrize(
    'tag_vocab, expected', [(['D', 'E', 'F'], [1, 1, 1]), (['D', 'E'], [1, 1])]
)
def test_tag_tokens_to_ids(tag_vocab, expected):
    to_ids = tag_prediction_preprocessing.build_to_ids_fn(['A', 'B', 'C'], tag_vocab)
    _, tags = to_ids({'tokens': '', 'title': '', 'tags': 'D|E|F'})
    assert np.allclose(tags.numpy(), expected)


@pytest.mark.parametrize(
    'word_vocab, tag_vocab, message',
    [([], ['B'], 'word_vocab must be non-empty'), (['A'], [], 'tag_vocab must be non-empty')],
)
def test_tag_preprocess_fn_with_empty_vocab_raises(word_vocab, tag_vocab, message):
    with pytest.raises(ValueError, match=message):
        tag_prediction_preprocessing.create_preprocess_fn(
            client_spec.ClientSpec(num_epochs=1, batch_size=1),
            word_vocab=word_vocab,
            tag_vocab=tag_vocab,
        )


TAG_TEST_DATA = collections.OrderedDict(
    creation_date=['unused date'],
    score=[tf.constant(0, dtype=tf.int64)],
    tags=['B'],
    title=['C'],
    tokens=['A'],
    type=['unused type'],
)


@pytest.mark.parametrize(
    'num_epochs, batch_size', [(1, 1), (4, 2), (9, 3), (12, 1), (3, 5), (7, 2)]
)
def test_tag_ds_length_is_ceil_num_epochs_over_batch_size(num_epochs, batch_size):
    preprocess_fn = tag_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=num_epochs, batch_size=batch_size),
        word_vocab=['A'],
        tag_vocab=['B'],
    )
    assert _length(preprocess_fn(tf.data.Dataset.from_tensor_slices(TAG_TEST_DATA))) == _ceil(
        num_epochs, batch_size
    )


def test_tag_preprocess_fn_returns_correct_element():
    preprocess_fn = tag_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=1, batch_size=1, shuffle_buffer_size=1),
        word_vocab=['A', 'B', 'C'],
        tag_vocab=['A', 'B'],
    )
    ds = preprocess_fn(tf.data.Dataset.from_tensor_slices(TAG_TEST_DATA))
    assert ds.element_spec == (
        tf.TensorSpec((None, 3), dtype=tf.float32),
        tf.TensorSpec((None, 2), dtype=tf.float32),
    )
    x, y = next(iter(ds))
    assert np.allclose(x.numpy(), [[0.5, 0.0, 0.5]]) and np.allclose(y.numpy(), [[0.0, 1.0]])


@pytest.mark.parametrize('max_elements', [1, 3, 7, 11, 18])
def test_tag_ds_length_with_max_elements(max_elements):
    preprocess_fn = tag_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=10, batch_size=1, max_elements=max_elements),
        word_vocab=['A'],
        tag_vocab=['B'],
    )
    assert _length(preprocess_fn(tf.data.Dataset.from_tensor_slices(TAG_TEST_DATA))) == min(
        10, max_elements
    )


# --- ours: TFF's files in a cache_dir -----------------------------------------------------


def _post(tokens, tags):
    return {
        'creation_date': b'2020-01-01 00:00:00 UTC',
        'score': 1,
        'tags': tags,
        'title': b'a title',
        'tokens': tokens,
        'type': b'question',
    }


@pytest.fixture
def so_dir(tmp_path):
    write_tff_sqlite(
        tmp_path / 'stackoverflow.sqlite',
        [
            ('train', 'u1', _post(b'how to sort a list', b'python|list')),
            ('train', 'u2', _post(b'sort a dict', b'python')),
            ('heldout', 'u3', _post(b'a list', b'list')),
            ('test', 'u4', _post(b'sort it', b'python|sort')),
        ],
    )
    (tmp_path / 'stackoverflow.word_count').write_text('a 9\nsort 7\nlist 5\nhow 2\n')
    (tmp_path / 'stackoverflow.tag_count').write_text(json.dumps({'python': 9, 'list': 3}))
    return tmp_path


def test_word_task_reads_local_files(so_dir):
    task = tff.simulation.baselines.stackoverflow.create_word_prediction_task(
        client_spec.ClientSpec(num_epochs=1, batch_size=4),
        sequence_length=5,
        vocab_size=3,
        cache_dir=str(so_dir),
    )
    assert sorted(task.datasets.train_data.client_ids) == ['u1', 'u2']
    assert task.datasets.validation_data.client_ids == ['u3']
    x, _ = next(iter(task.datasets.get_centralized_test_data()))
    # vocab ['a', 'sort', 'list']: bos = 5, 'sort' = 2, 'it' out of vocabulary (4), eos = 6.
    assert x.numpy().tolist() == [[5, 2, 4, 6, 0]]


def test_tag_task_reads_local_files(so_dir):
    task = tff.simulation.baselines.stackoverflow.create_tag_prediction_task(
        client_spec.ClientSpec(num_epochs=1, batch_size=4),
        word_vocab_size=3,
        tag_vocab_size=2,
        cache_dir=str(so_dir),
    )
    x, y = next(iter(task.datasets.get_centralized_test_data()))
    # 'sort it a title' over ['a', 'sort', 'list']: a and sort, once each.
    assert np.allclose(x.numpy(), [[0.5, 0.5, 0.0]]) and np.allclose(y.numpy(), [[1.0, 0.0]])


@pytest.mark.parametrize('missing', ['stackoverflow.sqlite', 'stackoverflow.word_count'])
def test_word_task_without_a_file_names_it(so_dir, missing):
    (so_dir / missing).unlink()
    with pytest.raises(tff.simulation.datasets.DatasetFileNotFoundError, match=missing):
        tff.simulation.baselines.stackoverflow.create_word_prediction_task(
            TRAIN_SPEC, cache_dir=str(so_dir)
        )
