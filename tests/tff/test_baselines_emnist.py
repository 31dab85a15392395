"""Port of TFF's ``.../simulation/baselines/emnist/`` tests: ``emnist_models_test.py``,
``emnist_preprocessing_test.py``, ``char_recognition_tasks_test.py`` and
``autoencoder_tasks_test.py``.

No case left out. Added: `create_character_recognition_task` reading a tiny
``emnist_all.sqlite`` in TFF's layout (``cache_dir``), its error when the file is
absent (nothing is downloaded), and the ``_from_datasets`` constructor on a
`TestClientData`.
"""

import collections
from unittest import mock

import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.baselines import baseline_task, client_spec
from simharness.simulation.baselines.emnist import (
    autoencoder_tasks,
    char_recognition_tasks,
    emnist_models,
    emnist_preprocessing,
)
from tests.tff.simulation.datasets_files import write_tff_sqlite

# --- emnist_models_test.py ----------------------------------------------------------------


def test_conv_dropout_only_digits_shape():
    model = emnist_models.create_conv_dropout_model(only_digits=True)
    assert model(tf.random.normal([4, 28, 28, 1])).shape == (4, 10)


def test_conv_dropout_shape():
    model = emnist_models.create_conv_dropout_model(only_digits=False)
    assert model(tf.random.normal([3, 28, 28, 1])).shape == (3, 62)


def test_conv_dropout_and_cnn_number_of_parameters():
    # TFF's docstrings: 1,199,882 and 1,663,370 parameters with only_digits.
    assert emnist_models.create_conv_dropout_model(only_digits=True).count_params() == 1199882
    assert (
        emnist_models.create_original_fedavg_cnn_model(only_digits=True).count_params() == 1663370
    )


def test_2nn_output_shape():
    model = emnist_models.create_two_hidden_layer_model(only_digits=False, hidden_units=200)
    assert model(tf.random.normal([7, 28, 28, 1])).shape == (7, 62)


def test_2nn_raises_on_nonpositive_hidden_units():
    with pytest.raises(ValueError, match='hidden_units must be a positive integer'):
        emnist_models.create_two_hidden_layer_model(only_digits=True, hidden_units=0)


def test_2nn_number_of_parameters():
    model = emnist_models.create_two_hidden_layer_model(only_digits=True, hidden_units=200)
    assert model.count_params() == (28 * 28 + 1) * 200 + 201 * 200 + 201 * 10


def test_debug_seed_gives_the_same_weights():
    a = emnist_models.create_two_hidden_layer_model(hidden_units=5, debug_seed=3)
    b = emnist_models.create_two_hidden_layer_model(hidden_units=5, debug_seed=3)
    for x, y in zip(a.get_weights(), b.get_weights()):
        assert (x == y).all()


def test_autoencoder_model_shape():
    model = emnist_models.create_autoencoder_model()
    assert model(tf.random.normal([4, 28 * 28])).shape == (4, 28 * 28)
    assert model.count_params() == 2837314


# --- emnist_preprocessing_test.py ---------------------------------------------------------

TEST_DATA = collections.OrderedDict(
    label=[tf.constant(0, dtype=tf.int32)], pixels=[tf.zeros((28, 28), dtype=tf.float32)]
)


def _length(ds):
    return int(ds.reduce(0, lambda x, _: x + 1))


def test_non_supported_task_raises():
    spec = client_spec.ClientSpec(num_epochs=1, batch_size=1)
    with pytest.raises(
        ValueError, match='emnist_task must be one of "character_recognition" or "autoencoder".'
    ):
        emnist_preprocessing.create_preprocess_fn(spec, emnist_task='bad_task')


@pytest.mark.parametrize(
    'num_epochs, batch_size', [(1, 1), (4, 2), (9, 3), (12, 1), (5, 3), (7, 2)]
)
def test_ds_length_is_ceil_num_epochs_over_batch_size(num_epochs, batch_size):
    spec = client_spec.ClientSpec(num_epochs=num_epochs, batch_size=batch_size)
    ds = emnist_preprocessing.create_preprocess_fn(spec)(
        tf.data.Dataset.from_tensor_slices(TEST_DATA)
    )
    assert _length(ds) == -(-num_epochs // batch_size)


@pytest.mark.parametrize('max_elements', [1, 3, 7, 11, 18])
def test_ds_length_with_max_elements(max_elements):
    spec = client_spec.ClientSpec(num_epochs=1, batch_size=1, max_elements=max_elements)
    ds = emnist_preprocessing.create_preprocess_fn(spec)(
        tf.data.Dataset.from_tensor_slices(TEST_DATA).repeat(10)
    )
    assert _length(ds) == min(10, max_elements)


def test_character_recognition_preprocess_returns_correct_elements():
    spec = client_spec.ClientSpec(num_epochs=1, batch_size=20, shuffle_buffer_size=1)
    ds = emnist_preprocessing.create_preprocess_fn(spec, emnist_task='character_recognition')(
        tf.data.Dataset.from_tensor_slices(TEST_DATA)
    )
    assert ds.element_spec == (
        tf.TensorSpec(shape=(None, 28, 28, 1), dtype=tf.float32),
        tf.TensorSpec(shape=(None,), dtype=tf.int32),
    )
    x, y = next(iter(ds))
    assert x.numpy().shape == (1, 28, 28, 1) and not x.numpy().any()
    assert y.numpy().tolist() == [0]


def test_autoencoder_preprocess_returns_correct_elements():
    spec = client_spec.ClientSpec(num_epochs=1, batch_size=20, shuffle_buffer_size=1)
    ds = emnist_preprocessing.create_preprocess_fn(spec, emnist_task='autoencoder')(
        tf.data.Dataset.from_tensor_slices(TEST_DATA)
    )
    assert ds.element_spec == (
        tf.TensorSpec(shape=(None, 784), dtype=tf.float32),
        tf.TensorSpec(shape=(None, 784), dtype=tf.float32),
    )
    x, y = next(iter(ds))
    assert x.numpy().shape == (1, 784) and (x.numpy() == 1).all() and (y.numpy() == 1).all()


# --- char_recognition_tasks_test.py -------------------------------------------------------

_BUILDERS = {
    'cnn_dropout': 'create_conv_dropout_model',
    'cnn': 'create_original_fedavg_cnn_model',
    '2nn': 'create_two_hidden_layer_model',
}


@pytest.mark.parametrize('only_digits', [True, False])
@pytest.mark.parametrize('model_id', list(_BUILDERS))
def test_get_character_recognition_model_constructs(model_id, only_digits):
    for seed in (None, 42):
        with mock.patch.object(emnist_models, _BUILDERS[model_id]) as builder:
            kwargs = {} if seed is None else {'debug_seed': seed}
            char_recognition_tasks._get_character_recognition_model(
                model_id=model_id, only_digits=only_digits, **kwargs
            )
            builder.assert_called_once_with(only_digits=only_digits, debug_seed=seed)


@pytest.mark.parametrize('only_digits', [True, False])
def test_raises_on_unsupported_model(only_digits):
    with pytest.raises(ValueError):
        char_recognition_tasks._get_character_recognition_model(
            model_id='unsupported_model', only_digits=only_digits
        )


_TASK_CASES = [(d, m) for m in ('cnn', 'cnn_dropout', '2nn') for d in (True, False)]


@pytest.mark.parametrize('only_digits, model_id', _TASK_CASES)
def test_constructs_with_eval_client_spec(only_digits, model_id):
    task = char_recognition_tasks.create_character_recognition_task(
        client_spec.ClientSpec(num_epochs=2, batch_size=10, max_elements=3, shuffle_buffer_size=5),
        eval_client_spec=client_spec.ClientSpec(
            num_epochs=1, batch_size=2, max_elements=5, shuffle_buffer_size=10
        ),
        model_id=model_id,
        only_digits=only_digits,
        use_synthetic_data=True,
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('only_digits, model_id', _TASK_CASES)
def test_constructs_with_no_eval_client_spec(only_digits, model_id):
    task = char_recognition_tasks.create_character_recognition_task(
        client_spec.ClientSpec(num_epochs=2, batch_size=10, max_elements=3, shuffle_buffer_size=5),
        model_id=model_id,
        only_digits=only_digits,
        use_synthetic_data=True,
    )
    assert isinstance(task, baseline_task.BaselineTask)


# --- autoencoder_tasks_test.py ------------------------------------------------------------


@pytest.mark.parametrize('with_eval_spec', [True, False])
def test_autoencoder_task_constructs(with_eval_spec):
    eval_spec = (
        client_spec.ClientSpec(num_epochs=1, batch_size=2, max_elements=5, shuffle_buffer_size=10)
        if with_eval_spec
        else None
    )
    task = autoencoder_tasks.create_autoencoder_task(
        client_spec.ClientSpec(num_epochs=2, batch_size=10, max_elements=3, shuffle_buffer_size=5),
        eval_client_spec=eval_spec,
        use_synthetic_data=True,
    )
    assert isinstance(task, baseline_task.BaselineTask)


# --- ours: data read from local files, data given -----------------------------------------


def _pixels(v):
    return [v] * (28 * 28)


def test_character_recognition_task_reads_local_file(tmp_path):
    rows = [
        ('digits_only_train', 'w0', {'label': 3, 'pixels': _pixels(0.5)}),
        ('digits_only_train', 'w0', {'label': 4, 'pixels': _pixels(0.25)}),
        ('digits_only_train', 'w1', {'label': 7, 'pixels': _pixels(1.0)}),
        ('digits_only_test', 'w0', {'label': 1, 'pixels': _pixels(0.0)}),
    ]
    write_tff_sqlite(tmp_path / 'emnist_all.sqlite', rows)
    task = tff.simulation.baselines.emnist.create_character_recognition_task(
        tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=8, shuffle_buffer_size=1),
        model_id='2nn',
        only_digits=True,
        cache_dir=str(tmp_path),
    )
    assert task.datasets.train_data.client_ids == ['w0', 'w1']
    (w0,) = [
        ds
        for ds in task.datasets.sample_train_clients(2, random_seed=0)
        if _length(ds) and next(iter(ds))[1].shape[0] == 2
    ]
    x, y = next(iter(w0))
    assert x.shape == (2, 28, 28, 1) and sorted(y.numpy().tolist()) == [3, 4]
    test_x, test_y = next(iter(task.datasets.get_centralized_test_data()))
    assert test_x.shape == (1, 28, 28, 1) and test_y.numpy().tolist() == [1]


def test_character_recognition_task_without_the_file_names_it(tmp_path):
    spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=8)
    with pytest.raises(tff.simulation.datasets.DatasetFileNotFoundError, match='emnist_all.sqlite'):
        tff.simulation.baselines.emnist.create_character_recognition_task(
            spec, cache_dir=str(tmp_path)
        )


def test_character_recognition_task_from_datasets():
    data = tff.simulation.datasets.TestClientData(
        {
            'a': collections.OrderedDict(label=[1, 2, 3], pixels=[[[0.5] * 28] * 28] * 3),
            'b': collections.OrderedDict(label=[4], pixels=[[[0.0] * 28] * 28]),
        }
    )
    task = tff.simulation.baselines.emnist.create_character_recognition_task_from_datasets(
        tff.simulation.baselines.ClientSpec(num_epochs=2, batch_size=4, shuffle_buffer_size=1),
        None,
        '2nn',
        True,
        data,
        data,
        debug_seed=1,
    )
    assert task.datasets.element_type_structure == (
        tf.TensorSpec((None, 28, 28, 1), tf.float32),
        tf.TensorSpec((None,), tf.int32),
    )
    (a,) = [ds for ds in task.datasets.sample_train_clients(2, random_seed=0) if _length(ds) == 2]
    assert [y.numpy().tolist() for _, y in a] == [[1, 2, 3, 1], [2, 3]]
    # The default eval spec: batches of 64, one epoch, no shuffle.
    test = list(task.datasets.get_centralized_test_data())
    assert len(test) == 1 and sorted(test[0][1].numpy().tolist()) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="must be one of \\['cnn_dropout', 'cnn', '2nn'\\]"):
        tff.simulation.baselines.emnist.create_character_recognition_task_from_datasets(
            tff.simulation.baselines.ClientSpec(1, 1), None, 'resnet', True, data, data
        )
