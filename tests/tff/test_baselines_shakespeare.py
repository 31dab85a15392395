"""Port of TFF's ``.../simulation/baselines/shakespeare/`` tests
(``char_prediction_tasks_test.py``, ``char_prediction_models_test.py``,
``char_prediction_preprocessing_test.py``) and of ``.../baselines/keras_metrics_test.py``.

No case left out. Added: `create_character_prediction_task` reading a tiny
``shakespeare.sqlite`` and its error when the file is absent, and the
``_from_datasets`` constructor on a `TestClientData` with its model run on a batch.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.baselines import baseline_task, client_spec, keras_metrics
from simharness.simulation.baselines.shakespeare import (
    char_prediction_models,
    char_prediction_preprocessing,
    char_prediction_tasks,
)
from tests.tff.simulation.datasets_files import write_tff_sqlite

TRAIN_SPEC = client_spec.ClientSpec(
    num_epochs=2, batch_size=10, max_elements=3, shuffle_buffer_size=5
)

# --- char_prediction_tasks_test.py --------------------------------------------------------


def test_constructs_with_eval_client_spec():
    task = char_prediction_tasks.create_character_prediction_task(
        TRAIN_SPEC,
        eval_client_spec=client_spec.ClientSpec(
            num_epochs=1, batch_size=2, max_elements=5, shuffle_buffer_size=10
        ),
        use_synthetic_data=True,
    )
    assert isinstance(task, baseline_task.BaselineTask)


def test_constructs_without_eval_client_spec():
    task = char_prediction_tasks.create_character_prediction_task(
        TRAIN_SPEC, use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('sequence_length', [1, 8, 10, 50])
def test_constructs_with_different_sequence_lengths(sequence_length):
    task = char_prediction_tasks.create_character_prediction_task(
        TRAIN_SPEC, sequence_length=sequence_length, use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('sequence_length', [0, -1, -5])
def test_raises_on_bad_sequence_lengths(sequence_length):
    with pytest.raises(ValueError):
        char_prediction_tasks.create_character_prediction_task(
            TRAIN_SPEC, sequence_length=sequence_length, use_synthetic_data=True
        )


# --- char_prediction_models_test.py -------------------------------------------------------


def test_create_recurrent_model_raises_on_nonpositive_vocab_size():
    with pytest.raises(ValueError, match='vocab_size must be a positive integer'):
        char_prediction_models.create_recurrent_model(vocab_size=-2, sequence_length=8)


def test_create_recurrent_model_raises_on_nonpositive_sequence_length():
    with pytest.raises(ValueError, match='sequence_length must be a positive integer'):
        char_prediction_models.create_recurrent_model(vocab_size=3, sequence_length=0)


def test_model_input_output_shape():
    model = char_prediction_models.create_recurrent_model(5, 7)
    assert tuple(model.input_shape) == (None, 7)
    assert tuple(model.output_shape) == (None, 7, 5)


def test_mask_zero_results_in_correct_mask():
    model = char_prediction_models.create_recurrent_model(
        vocab_size=3, sequence_length=3, mask_zero=True
    )
    mask = getattr(model(tf.constant([[0, 1, 1]])), '_keras_mask', None)
    assert mask is not None and mask.numpy().tolist() == [[False, True, True]]


def test_no_mask_zero_results_in_correct_mask():
    model = char_prediction_models.create_recurrent_model(
        vocab_size=3, sequence_length=3, mask_zero=False
    )
    assert getattr(model(tf.constant([[0, 1, 1]])), '_keras_mask', None) is None


# --- char_prediction_preprocessing_test.py ------------------------------------------------


def _length(ds):
    return int(ds.reduce(0, lambda x, _: x + 1))


def test_tokenize_fn_returns_expected_elements():
    pad, _, bos, eos = char_prediction_preprocessing.get_special_tokens()
    to_tokens = char_prediction_preprocessing._build_tokenize_fn(split_length=5)
    assert to_tokens({'snippets': tf.constant('abc')}).numpy().tolist() == [bos, 64, 42, 21, eos]
    to_tokens = char_prediction_preprocessing._build_tokenize_fn(split_length=12)
    assert to_tokens({'snippets': tf.constant('star wars')}).numpy().tolist() == [
        bos,
        25,
        5,
        64,
        46,
        14,
        26,
        64,
        46,
        25,
        eos,
        pad,
    ]


def test_tokenize_appends_eos_token():
    _, oov, bos, eos = char_prediction_preprocessing.get_special_tokens()
    to_tokens = char_prediction_preprocessing._build_tokenize_fn(split_length=5)
    assert to_tokens({'snippets': tf.constant('a\r~')}).numpy().tolist() == [bos, 64, 86, oov, eos]


def test_split_target():
    x, y = char_prediction_preprocessing._split_target(tf.constant([[1, 2, 3]]))
    assert (x.numpy().tolist(), y.numpy().tolist()) == ([[1, 2]], [[2, 3]])
    x, y = char_prediction_preprocessing._split_target(tf.constant([[1, 2, 3], [4, 5, 6]]))
    assert (x.numpy().tolist(), y.numpy().tolist()) == ([[1, 2], [4, 5]], [[2, 3], [5, 6]])


@pytest.mark.parametrize('sequence_length', [0, -1, -2])
def test_nonpositive_sequence_length_raises(sequence_length):
    with pytest.raises(ValueError, match='sequence_length must be a positive integer'):
        char_prediction_preprocessing.create_preprocess_fn(
            client_spec.ClientSpec(num_epochs=1, batch_size=1), sequence_length=sequence_length
        )


def test_preprocess_fn_produces_expected_outputs():
    pad, _, bos, eos = char_prediction_preprocessing.get_special_tokens()
    initial_ds = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(snippets=['a snippet', 'different snippet'])
    )
    preprocess_fn = char_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=2, batch_size=2, shuffle_buffer_size=1),
        sequence_length=10,
    )
    a = [bos, 64, 14, 25, 45, 66, 4, 4, 65, 5]
    a_next = [64, 14, 25, 45, 66, 4, 4, 65, 5, eos]
    different = [bos, 1, 66, 43, 43, 65, 46, 65, 45, 5]
    different_next = [1, 66, 43, 43, 65, 46, 65, 45, 5, 14]
    tail = [25, 45, 66, 4, 4, 65, 5, eos, pad, pad]
    tail_next = [45, 66, 4, 4, 65, 5, eos, pad, pad, pad]
    expected = [
        ([a, different], [a_next, different_next]),
        ([tail, a], [tail_next, a_next]),
        ([different, tail], [different_next, tail_next]),
    ]
    actual = [(x.numpy().tolist(), y.numpy().tolist()) for x, y in preprocess_fn(initial_ds)]
    assert actual == expected


@pytest.mark.parametrize(
    'num_epochs, batch_size', [(1, 1), (4, 2), (9, 3), (12, 1), (3, 5), (7, 2)]
)
def test_ds_length_is_ceil_num_epochs_over_batch_size(num_epochs, batch_size):
    ds = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(snippets=['test_sequence']))
    preprocess_fn = char_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=num_epochs, batch_size=batch_size),
        sequence_length=len('test_sequence') + 1,
    )
    assert _length(preprocess_fn(ds)) == -(-num_epochs // batch_size)


@pytest.mark.parametrize('max_elements', [1, 3, 7, 11, 18])
def test_ds_length_with_max_elements(max_elements):
    ds = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(snippets=['test_sequence'])
    ).repeat(10)
    preprocess_fn = char_prediction_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=1, batch_size=1, max_elements=max_elements)
    )
    assert _length(preprocess_fn(ds)) == min(10, max_elements)


# --- keras_metrics_test.py ----------------------------------------------------------------

Y_TRUE = [[1, 2, 3, 4], [0, 0, 0, 0]]
# The first row all right, the second half right.
Y_PRED = [
    [
        [0.1, 0.9, 0.1, 0.1, 0.1],
        [0.1, 0.1, 0.9, 0.1, 0.1],
        [0.1, 0.1, 0.1, 0.9, 0.1],
        [0.1, 0.1, 0.1, 0.1, 0.9],
    ],
    [
        [0.1, 0.9, 0.1, 0.1, 0.1],
        [0.9, 0.1, 0.1, 0.1, 0.1],
        [0.1, 0.1, 0.1, 0.9, 0.1],
        [0.9, 0.1, 0.1, 0.1, 0.0],
    ],
]
# Against [[0, 4, 1, 2]]: a quarter right.
Y_TRUE_2 = [[0, 4, 1, 2]]
Y_PRED_2 = [
    [
        [0.9, 0.1, 0.1, 0.1, 0.1],
        [0.1, 0.1, 0.1, 0.1, 0.9],
        [0.1, 0.1, 0.1, 0.9, 0.1],
        [0.1, 0.1, 0.1, 0.1, 0.9],
    ]
]


def test_num_tokens_constructor_no_masked_token():
    metric = keras_metrics.NumTokensCounter(name='my_test_metric')
    assert isinstance(metric, tf.keras.metrics.Metric)
    assert metric.name == 'my_test_metric' and int(metric.result()) == 0


@pytest.mark.parametrize(
    'masked, weight, expected',
    [(None, None, 8), ([0], None, 4), (None, [[1, 2, 3, 4], [1, 1, 1, 1]], 14)],
)
def test_num_tokens_counts(masked, weight, expected):
    metric = keras_metrics.NumTokensCounter(masked_tokens=masked)
    metric.update_state(y_true=Y_TRUE, y_pred=[0], sample_weight=weight)
    assert int(metric.result()) == expected


def test_num_tokens_counts_with_zero_mask_with_sample_weight():
    metric = keras_metrics.NumTokensCounter(masked_tokens=[0])
    metric.update_state(
        y_true=[[1, 2, 3, 0], [1, 0, 0, 0]], y_pred=[0], sample_weight=[[1, 2, 3, 4], [1, 1, 1, 1]]
    )
    assert int(metric.result()) == 7


@pytest.mark.parametrize('masked', [None, [100]])
def test_masked_accuracy_constructor(masked):
    metric = keras_metrics.MaskedCategoricalAccuracy(name='my_test_metric', masked_tokens=masked)
    assert isinstance(metric, tf.keras.metrics.Metric)
    assert metric.name == 'my_test_metric'
    assert list(metric.get_config()['masked_tokens']) == (masked or [])
    assert float(metric.result()) == 0.0


@pytest.mark.parametrize('masked, first, second', [([4], 5 / 7, 6 / 10), (None, 6 / 8, 8 / 12)])
def test_masked_accuracy_update_state(masked, first, second):
    metric = keras_metrics.MaskedCategoricalAccuracy(masked_tokens=masked)
    metric.update_state(y_true=Y_TRUE, y_pred=Y_PRED)
    assert np.isclose(float(metric.result()), first)
    metric.update_state(y_true=Y_TRUE_2, y_pred=Y_PRED_2)
    assert np.isclose(float(metric.result()), second)


def test_weighted_update_state_with_masked_token():
    metric = keras_metrics.MaskedCategoricalAccuracy(masked_tokens=[4])
    metric.update_state(
        y_true=Y_TRUE, y_pred=Y_PRED, sample_weight=[[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]]
    )
    assert np.isclose(float(metric.result()), (4 + 4) / 10.0)
    metric.update_state(y_true=Y_TRUE_2, y_pred=Y_PRED_2, sample_weight=[1.0, 1.0, 2.0, 2.0])
    assert np.isclose(float(metric.result()), (4 + 4 + 1) / 15.0)


def test_weighted_update_state_no_special_character():
    metric = keras_metrics.MaskedCategoricalAccuracy()
    metric.update_state(
        y_true=Y_TRUE, y_pred=Y_PRED, sample_weight=[1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    )
    assert np.isclose(float(metric.result()), (6 + 4) / 12.0)
    metric.update_state(y_true=Y_TRUE_2, y_pred=Y_PRED_2, sample_weight=[1.0, 1.0, 2.0, 2.0])
    assert np.isclose(float(metric.result()), (6 + 4 + 2) / 18.0)


def test_weighted_update_state_no_special_character_rank_2_sample_weight():
    metric = keras_metrics.MaskedCategoricalAccuracy()
    metric.update_state(
        y_true=Y_TRUE, y_pred=Y_PRED, sample_weight=[[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]]
    )
    assert np.isclose(float(metric.result()), (6 + 4) / 12.0)


def test_weighted_update_state_with_scalar_weight():
    metric = keras_metrics.MaskedCategoricalAccuracy()
    metric.update_state(
        y_true=[[1, 2, 3, 4]],
        y_pred=[
            [
                [0.9, 0.1, 0.1, 0.1, 0.1],
                [0.1, 0.9, 0.1, 0.1, 0.1],
                [0.1, 0.1, 0.1, 0.9, 0.1],
                [0.1, 0.1, 0.1, 0.1, 0.9],
            ]
        ],
        sample_weight=1.0,
    )
    assert np.isclose(float(metric.result()), 0.5)


def test_weighted_update_state_special_character_rank_2_sample_weight():
    metric = keras_metrics.MaskedCategoricalAccuracy(masked_tokens=[4])
    metric.update_state(
        y_true=Y_TRUE, y_pred=Y_PRED, sample_weight=[[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]]
    )
    assert np.isclose(float(metric.result()), (6 + 2) / 10.0)


def test_update_state_with_multiple_tokens_masked():
    metric = keras_metrics.MaskedCategoricalAccuracy(masked_tokens=[1, 2, 3, 4])
    metric.update_state(y_true=Y_TRUE, y_pred=Y_PRED)
    assert np.isclose(float(metric.result()), 0.5)


def test_update_state_with_all_tokens_masked():
    metric = keras_metrics.MaskedCategoricalAccuracy(masked_tokens=[1, 2, 3, 4])
    metric.update_state(y_true=[[1, 2, 3, 4], [4, 3, 2, 1]], y_pred=Y_PRED)
    assert np.isclose(float(metric.result()), 0.0)


# --- ours: data given, data read from local files -----------------------------------------


def test_character_prediction_task_from_datasets_runs_its_model():
    data = tff.simulation.datasets.TestClientData(
        {
            'ROLE_A': collections.OrderedDict(snippets=['To be, or not to be', 'Ay, there']),
            'ROLE_B': collections.OrderedDict(snippets=['Alas, poor Yorick!']),
        }
    )
    task = tff.simulation.baselines.shakespeare.create_character_prediction_task_from_datasets(
        client_spec.ClientSpec(num_epochs=1, batch_size=4, shuffle_buffer_size=1),
        None,
        8,
        data,
        data,
    )
    spec = tf.TensorSpec((None, 8), tf.int64)
    assert task.datasets.element_type_structure == (spec, spec)
    x, y = next(iter(task.datasets.get_centralized_test_data()))
    assert x.shape[1] == 8 and (x.numpy()[:, 1:] == y.numpy()[:, :-1]).all()
    with tf.Graph().as_default():
        model = task.model_fn()
        assert [m.name for m in model.get_metrics()][:2] == ['num_tokens', 'accuracy']


def test_character_prediction_task_reads_local_file(tmp_path):
    write_tff_sqlite(
        tmp_path / 'shakespeare.sqlite',
        [
            ('train', 'ROLE_A', {'snippets': b'Now is the winter'}),
            ('train', 'ROLE_B', {'snippets': b'Friends, Romans'}),
            ('test', 'ROLE_A', {'snippets': b'of our discontent'}),
        ],
    )
    task = tff.simulation.baselines.shakespeare.create_character_prediction_task(
        client_spec.ClientSpec(num_epochs=1, batch_size=2),
        sequence_length=5,
        cache_dir=str(tmp_path),
    )
    assert sorted(task.datasets.train_data.client_ids) == ['ROLE_A', 'ROLE_B']
    batches = list(task.datasets.get_centralized_test_data())
    # bos + 17 characters + eos = 19 ids, padded to 24: 4 sequences of 6, batches of 32.
    assert len(batches) == 1 and batches[0][0].shape == (4, 5)


def test_character_prediction_task_without_the_file_names_it(tmp_path):
    with pytest.raises(
        tff.simulation.datasets.DatasetFileNotFoundError, match='shakespeare.sqlite'
    ):
        tff.simulation.baselines.shakespeare.create_character_prediction_task(
            TRAIN_SPEC, cache_dir=str(tmp_path)
        )
