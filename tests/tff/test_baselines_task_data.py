"""Port of TFF's ``.../simulation/baselines/task_data_test.py`` and ``baseline_task_test.py``.

Left out, as TFF skips them (b/249818282: train and test element types are not
compared): the three ``test_raises_when_train_and_test_types_are_different_*``.
Added: `ClientSpec`'s validation (TFF has no test module for ``client_spec.py``).
"""

import attrs
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.baselines import baseline_task, client_spec, task_data


def create_client_data(num_clients):
    """Clients '0'..'n-1', client k holding range(k + 1)."""
    client_ids = [str(x) for x in range(num_clients)]

    def create_dataset_fn(client_id):
        return tf.data.Dataset.range(tf.strings.to_number(client_id, out_type=tf.int64) + 1)

    return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(client_ids, create_dataset_fn)


def as_list(ds):
    return list(ds.as_numpy_iterator())


def _to_int32(dataset):
    return dataset.map(lambda x: tf.cast(x, tf.int32))


# --- ClientSpec ---------------------------------------------------------------------------


def test_client_spec_defaults_and_conversion():
    spec = tff.simulation.baselines.ClientSpec(num_epochs=2.0, batch_size='3')
    assert (spec.num_epochs, spec.batch_size) == (2, 3)
    assert spec.max_elements is None and spec.shuffle_buffer_size is None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.num_epochs = 3


@pytest.mark.parametrize(
    'kwargs',
    [
        dict(num_epochs=0, batch_size=1),
        dict(num_epochs=1, batch_size=-2),
        dict(num_epochs=1, batch_size=1, max_elements=0),
        dict(num_epochs=1, batch_size=1, shuffle_buffer_size=0),
    ],
)
def test_client_spec_raises_on_non_positive(kwargs):
    with pytest.raises(ValueError, match='must be positive'):
        client_spec.ClientSpec(**kwargs)


def test_client_spec_raises_on_non_int_optional():
    with pytest.raises(TypeError):
        client_spec.ClientSpec(num_epochs=1, batch_size=1, max_elements=2.5)


# --- GetElementSpecTest -------------------------------------------------------------------


@pytest.mark.parametrize('dataset_type', ['Federated', 'Centralized'])
@pytest.mark.parametrize('preprocess', [False, True])
def test_get_element_spec(dataset_type, preprocess):
    data = create_client_data(10)
    if dataset_type == 'Centralized':
        data = data.create_tf_dataset_from_all_clients()
    dtype = tf.int32 if preprocess else tf.int64
    actual = task_data._get_element_spec(data, _to_int32 if preprocess else None)
    assert actual == tf.TensorSpec(shape=(), dtype=dtype)


# --- BaselineTaskDatasetsTest -------------------------------------------------------------


def test_raises_when_test_and_validation_types_are_different():
    with pytest.raises(
        ValueError,
        match='validation set must be None, or have the same '
        'element type structure as the test data',
    ):
        task_data.BaselineTaskDatasets(
            train_data=create_client_data(10),
            test_data=tf.data.Dataset.range(10),
            validation_data=tf.data.Dataset.range(10, output_type=tf.int32),
        )


@pytest.mark.parametrize('which', ['train_preprocess_fn', 'eval_preprocess_fn'])
def test_raises_on_non_callable_preprocess_fn(which):
    with pytest.raises(ValueError, match=f'The {which} must be None or callable'):
        task_data.BaselineTaskDatasets(
            train_data=create_client_data(2), test_data=create_client_data(2), **{which: 3}
        )


def test_constructs_without_eval_preprocess_fn():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(10),
        train_preprocess_fn=lambda x: x.map(lambda y: 2 * y),
        test_data=create_client_data(2),
    )
    assert as_list(datasets.train_preprocess_fn(tf.data.Dataset.range(20))) == [
        2 * i for i in range(20)
    ]
    assert datasets.eval_preprocess_fn is None


def test_constructs_with_eval_preprocess_fn():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(10),
        train_preprocess_fn=lambda x: x.map(lambda y: 2 * y),
        test_data=create_client_data(2),
        eval_preprocess_fn=lambda x: x.map(lambda y: 3 * y),
    )
    assert as_list(datasets.eval_preprocess_fn(tf.data.Dataset.range(20))) == [
        3 * i for i in range(20)
    ]


def test_element_type_structure_is_the_preprocessed_train_type():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(3),
        test_data=create_client_data(1),
        train_preprocess_fn=_to_int32,
    )
    assert datasets.element_type_structure == tf.TensorSpec((), tf.int32)


def test_sample_train_clients_returns_train_datasets():
    train_data = create_client_data(10)
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data, test_data=create_client_data(2)
    )
    all_clients = [
        as_list(train_data.create_tf_dataset_for_client(x)) for x in train_data.client_ids
    ]
    sampled = datasets.sample_train_clients(num_clients=3)
    assert len(sampled) == 3
    for ds in sampled:
        assert as_list(ds) in all_clients


def test_sample_train_clients_returns_preprocessed_train_datasets():
    preprocess_fn = lambda x: x.map(lambda y: 2 * y)  # noqa: E731
    train_data = create_client_data(10)
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data, train_preprocess_fn=preprocess_fn, test_data=create_client_data(2)
    )
    preprocessed = train_data.preprocess(preprocess_fn)
    all_clients = [
        as_list(preprocessed.create_tf_dataset_for_client(x)) for x in preprocessed.client_ids
    ]
    for ds in datasets.sample_train_clients(num_clients=5):
        assert as_list(ds) in all_clients


def test_sample_train_clients_random_seed():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(100), test_data=create_client_data(2)
    )
    data1 = [as_list(ds) for ds in datasets.sample_train_clients(5, random_seed=0)]
    data2 = [as_list(ds) for ds in datasets.sample_train_clients(5, random_seed=0)]
    data3 = [as_list(ds) for ds in datasets.sample_train_clients(5, random_seed=1)]
    assert data1 == data2
    assert data1 != data3


def test_sample_train_clients_without_replacement_raises_on_too_many():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(3), test_data=create_client_data(2)
    )
    with pytest.raises(ValueError):
        datasets.sample_train_clients(4)
    assert len(datasets.sample_train_clients(4, replace=True, random_seed=2)) == 4


def test_create_centralized_test_from_client_data():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(100), test_data=create_client_data(3)
    )
    assert sorted(as_list(datasets.get_centralized_test_data())) == [0, 0, 0, 1, 1, 2]


def test_create_centralized_test_from_client_data_with_eval_preprocess():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(100),
        test_data=create_client_data(3),
        eval_preprocess_fn=lambda x: x.map(lambda y: 3 * y),
    )
    assert sorted(as_list(datasets.get_centralized_test_data())) == [0, 0, 0, 3, 3, 6]


def test_create_centralized_test_from_dataset():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(100), test_data=tf.data.Dataset.range(7)
    )
    assert sorted(as_list(datasets.get_centralized_test_data())) == list(range(7))


def test_create_centralized_test_from_dataset_with_eval_preprocess():
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(100),
        test_data=tf.data.Dataset.range(7),
        eval_preprocess_fn=lambda x: x.map(lambda y: 3 * y),
    )
    assert sorted(as_list(datasets.get_centralized_test_data())) == [3 * a for a in range(7)]


@pytest.mark.parametrize('num_clients', [1, 4, 10])
def test_record_train_dataset_info(num_clients):
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(num_clients), test_data=create_client_data(2)
    )
    assert datasets._record_dataset_information()['train'] == ['Train', 'Federated', num_clients]


@pytest.mark.parametrize(
    'test_type, num_clients', [('Federated', 4), ('Federated', 15), ('Centralized', 'N/A')]
)
def test_record_test_dataset_info(test_type, num_clients):
    test_data = (
        create_client_data(num_clients) if test_type == 'Federated' else tf.data.Dataset.range(5)
    )
    datasets = task_data.BaselineTaskDatasets(train_data=create_client_data(1), test_data=test_data)
    assert datasets._record_dataset_information()['test'] == ['Test', test_type, num_clients]


def _validation(kind, num_clients):
    if kind == 'Federated':
        return create_client_data(num_clients)
    if kind == 'Centralized':
        return tf.data.Dataset.range(2)
    return None


@pytest.mark.parametrize(
    'validation_type, num_clients',
    [('Federated', 5), ('Federated', 23), ('Centralized', 'N/A'), (None, None)],
)
def test_record_validation_dataset_info(validation_type, num_clients):
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(1),
        test_data=create_client_data(1),
        validation_data=_validation(validation_type, num_clients),
    )
    info = datasets._record_dataset_information()
    if validation_type is None:
        assert 'validation' not in info
    else:
        assert info['validation'] == ['Validation', validation_type, num_clients]


@pytest.mark.parametrize('fn, is_not_none', [(lambda x: x, True), (None, False)])
def test_summary_train_preprocess_fn(fn, is_not_none):
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(10), train_preprocess_fn=fn, test_data=create_client_data(2)
    )
    lines = []
    datasets.summary(print_fn=lines.append)
    assert lines[5] == f'Train Preprocess Function: {is_not_none}'


@pytest.mark.parametrize('fn, is_not_none', [(lambda x: x, True), (None, False)])
def test_summary_eval_preprocess_fn(fn, is_not_none):
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(10), eval_preprocess_fn=fn, test_data=create_client_data(2)
    )
    lines = []
    datasets.summary(print_fn=lines.append)
    assert lines[6] == f'Eval Preprocess Function: {is_not_none}'


@pytest.mark.parametrize(
    'test_type, validation_type',
    [
        ('Federated', 'Federated'),
        ('Federated', 'Centralized'),
        ('Centralized', 'Federated'),
        ('Centralized', 'Centralized'),
        ('Federated', None),
        ('Centralized', None),
    ],
)
def test_data_summary_header_is_constant(test_type, validation_type):
    test_data = create_client_data(5) if test_type == 'Federated' else tf.data.Dataset.range(5)
    validation_data = {
        'Federated': create_client_data(4),
        'Centralized': tf.data.Dataset.range(7),
        None: None,
    }[validation_type]
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(10), test_data=test_data, validation_data=validation_data
    )
    lines = []
    datasets.summary(print_fn=lines.append)
    assert lines[0].split() == ['Split', '|Dataset', 'Type', '|Number', 'of', 'Clients', '|']


@pytest.mark.parametrize('num_clients', [1, 9, 7])
def test_summary_gives_correct_train_information(num_clients):
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(num_clients), test_data=tf.data.Dataset.range(5)
    )
    lines = []
    datasets.summary(print_fn=lines.append)
    assert lines[2].split() == ['Train', '|Federated', f'|{num_clients}', '|']


@pytest.mark.parametrize(
    'test_type, num_clients', [('Federated', 4), ('Federated', 15), ('Centralized', 'N/A')]
)
def test_summary_gives_correct_test_information(test_type, num_clients):
    test_data = (
        create_client_data(num_clients) if test_type == 'Federated' else tf.data.Dataset.range(5)
    )
    datasets = task_data.BaselineTaskDatasets(train_data=create_client_data(5), test_data=test_data)
    lines = []
    datasets.summary(print_fn=lines.append)
    assert lines[3].split() == ['Test', f'|{test_type}', f'|{num_clients}', '|']


@pytest.mark.parametrize(
    'validation_type, num_clients', [('Federated', 5), ('Federated', 23), ('Centralized', 'N/A')]
)
def test_summary_gives_correct_validation_information(validation_type, num_clients):
    datasets = task_data.BaselineTaskDatasets(
        train_data=create_client_data(1),
        test_data=create_client_data(1),
        validation_data=_validation(validation_type, num_clients),
    )
    lines = []
    datasets.summary(print_fn=lines.append)
    assert lines[4].split() == ['Validation', f'|{validation_type}', f'|{num_clients}', '|']


@pytest.mark.parametrize('with_validation', [False, True])
def test_summary_table_structure(with_validation):
    train_data = create_client_data(1)
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=train_data,
        validation_data=train_data if with_validation else None,
    )
    lines = []
    datasets.summary(print_fn=lines.append)
    rows = 3 if with_validation else 2
    assert len(lines) == 5 + rows
    width = len(lines[0])
    assert lines[1] == '=' * width
    assert all(len(lines[i]) == width for i in range(2, 2 + rows))
    assert lines[2 + rows] == '_' * width


# --- baseline_task_test.py ----------------------------------------------------------------


def _xy_dataset(client_id):
    del client_id
    # y = 2x + 1
    return tf.data.Dataset.from_tensor_slices(([[1.0], [2.0]], [[3.0], [5.0]])).batch(1)


def create_task_data():
    cd = tff.simulation.datasets.ClientData.from_clients_and_tf_fn(['1', '2', '3'], _xy_dataset)
    return task_data.BaselineTaskDatasets(train_data=cd, test_data=cd)


def keras_model_builder():
    inputs = tf.keras.layers.Input(shape=(3,), name='input_layer')
    outputs = tf.keras.layers.Dense(
        2, kernel_initializer='ones', use_bias=False, name='dense_layer'
    )(inputs)
    return tf.keras.models.Model(inputs=inputs, outputs=outputs, name='model')


def tff_model_builder():
    x_type = tf.TensorSpec(shape=(None, 1), dtype=tf.float32)
    return tff.learning.models.from_keras_model(
        keras_model_builder(), tf.keras.losses.MeanSquaredError(), input_spec=(x_type, x_type)
    )


def test_constructs_with_matching_dataset_and_model_spec():
    task = baseline_task.BaselineTask(create_task_data(), tff_model_builder)
    assert isinstance(task, tff.simulation.baselines.BaselineTask)


def test_construct_raises_on_non_baseline_task_spec_datasets():
    with pytest.raises(TypeError):
        baseline_task.BaselineTask(_xy_dataset(0), tff_model_builder)


def test_construct_raises_on_non_callable_model_fn():
    with pytest.raises(attrs.exceptions.NotCallableError):
        baseline_task.BaselineTask(create_task_data(), 'bad_input')


def test_construct_raises_on_non_tff_model():
    with pytest.raises(
        TypeError, match='Expected model_fn to output a tff.learning.models.VariableModel'
    ):
        baseline_task.BaselineTask(create_task_data(), keras_model_builder)


def test_raises_on_different_data_and_model_spec():
    spec = tf.TensorSpec(shape=(None, 4, 2), dtype=tf.float32)
    inputs = tf.keras.layers.Input(shape=(4, 2))
    keras_model = tf.keras.models.Model(
        inputs=inputs,
        outputs=tf.keras.layers.Dense(2, kernel_initializer='ones', use_bias=False)(inputs),
    )

    def tff_model_fn():
        return tff.learning.models.from_keras_model(
            keras_model, loss=tf.keras.losses.MeanSquaredError(), input_spec=(spec, spec)
        )

    with pytest.raises(ValueError, match='Dataset element spec and model input spec do not match'):
        baseline_task.BaselineTask(create_task_data(), tff_model_fn)
