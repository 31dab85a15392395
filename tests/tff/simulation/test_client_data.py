"""Port of TFF's ``tensorflow_federated/python/simulation/datasets/client_data_test.py``.

No case left out. ``test_dataset_from_large_client_list`` keeps TFF's million
client ids (it checks that building the joined dataset does not walk them in
Python). The dataset computations run on every stack of `tff_stack`.
"""

import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.datasets import client_data as cd

GOOD_SEEDS = [0, 1234, 2**32 - 1, [0, 2, 323], [1024], [2**31, 2**32 - 1], None]
BAD_SEEDS = [-1, 2**40, 2**32, [0, 2, -1], [2**33], [2**31, 2**32 - 1, -500], 'bad_seed']


@pytest.mark.parametrize('seed', GOOD_SEEDS)
def test_validate_does_not_raise_on_expected_inputs(seed):
    cd.check_numpy_random_seed(seed)


@pytest.mark.parametrize('seed', BAD_SEEDS)
def test_validate_raises_on_unexpected_inputs(seed):
    with pytest.raises(cd.InvalidRandomSeedError):
        cd.check_numpy_random_seed(seed)


def create_concrete_client_data():
    """Clients '1': [0], '2': [0, 1], '3': [0, 1, 2]."""

    def create_dataset_fn(client_id):
        return tf.data.Dataset.range(tf.strings.to_number(client_id, out_type=tf.int64))

    return cd.ClientData.from_clients_and_tf_fn(
        client_ids=['1', '2', '3'], serializable_dataset_fn=create_dataset_fn
    )


def dataset_length(dataset):
    return int(dataset.reduce(0, lambda x, _: x + 1))


def get_even_odd_client_data():
    """Only clients with even ids have data."""

    def create_dataset_fn(client_id):
        as_int = tf.strings.to_number(client_id, out_type=tf.int64)
        return tf.data.Dataset.range(1 if as_int % 2 == 0 else 0)

    return cd.ClientData.from_clients_and_tf_fn(
        client_ids=[str(x) for x in range(10)], serializable_dataset_fn=create_dataset_fn
    )


class TestTrainTestClientSplit:
    def test_split_train_test_selects_nonempty_test_clients(self):
        client_data = get_even_odd_client_data()
        train, test = cd.ClientData.train_test_client_split(client_data, num_test_clients=3)
        assert sorted(client_data.client_ids) == sorted(train.client_ids + test.client_ids)
        assert len(test.client_ids) == 3
        for client_id in test.client_ids:
            assert int(client_id) % 2 == 0
        train, test = cd.ClientData.train_test_client_split(client_data, num_test_clients=5)
        assert len(test.client_ids) == 5
        assert len(train.client_ids) == 5

    def test_split_train_test_not_enough_nonempty_clients(self):
        with pytest.raises(ValueError, match='too many clients with no data.'):
            cd.ClientData.train_test_client_split(get_even_odd_client_data(), num_test_clients=6)

    def test_split_train_test_too_few_clients(self):
        with pytest.raises(ValueError, match='has only 10 clients.*11'):
            cd.ClientData.train_test_client_split(get_even_odd_client_data(), num_test_clients=11)

    def test_split_train_test_no_test_clients_requested(self):
        with pytest.raises(ValueError, match='Please specify'):
            cd.ClientData.train_test_client_split(get_even_odd_client_data(), num_test_clients=0)

    def test_split_train_test_fixed_seed(self):
        client_data = get_even_odd_client_data()
        train_0, test_0 = cd.ClientData.train_test_client_split(client_data, 3, seed=0)
        train_1, test_1 = cd.ClientData.train_test_client_split(client_data, 3, seed=0)
        assert train_0.client_ids == train_1.client_ids
        assert test_0.client_ids == test_1.client_ids

    @pytest.mark.parametrize('seed', GOOD_SEEDS)
    def test_split_does_not_raise_on_expected_random_seed(self, seed):
        cd.ClientData.train_test_client_split(get_even_odd_client_data(), 3, seed=seed)

    @pytest.mark.parametrize('seed', BAD_SEEDS)
    def test_split_raises_on_unexpected_random_seed(self, seed):
        with pytest.raises(cd.InvalidRandomSeedError):
            cd.ClientData.train_test_client_split(get_even_odd_client_data(), 3, seed=seed)


class TestConcreteClientData:
    def test_raises_on_tff_computation(self):
        @tff.tf_computation
        def dataset_fn():
            return 0

        with pytest.raises(TypeError):
            cd.ClientData.from_clients_and_tf_fn(client_ids=[], serializable_dataset_fn=dataset_fn)

    def test_concrete_client_data_create_expected_datasets(self):
        client_data = create_concrete_client_data()
        assert client_data.element_type_structure == tf.TensorSpec(shape=(), dtype=tf.int64)
        for i in client_data.client_ids:
            assert dataset_length(client_data.create_tf_dataset_for_client(i)) == int(i)

    def test_dataset_computation_lists_all_elements(self, tff_stack):
        client_data = create_concrete_client_data()
        for client_id in client_data.client_ids:
            client_dataset = client_data.dataset_computation(client_id)
            assert list(client_dataset.as_numpy_iterator()) == list(range(int(client_id)))

    def test_datasets_is_lazy(self):
        client_ids = [1, 2, 3]
        called_count = 0

        def only_call_me_thrice(client_id):
            nonlocal called_count
            called_count += 1
            if called_count == 1:
                assert client_id == client_ids[0]
            if called_count > 3:
                raise RuntimeError('called too many times')
            return tf.data.Dataset.range(client_id)

        client_data = cd.ClientData.from_clients_and_tf_fn(
            client_ids=client_ids, serializable_dataset_fn=only_call_me_thrice
        )
        datasets_iter = client_data.datasets()
        next(datasets_iter)
        next(datasets_iter)
        with pytest.raises(RuntimeError, match='called too many times'):
            next(datasets_iter)

    def test_datasets_limit_count(self):
        assert len(list(create_concrete_client_data().datasets(limit_count=1))) == 1

    def test_datasets_doesnt_shuffle_client_ids_list(self):
        client_data = create_concrete_client_data()
        client_ids_copy = client_data.client_ids.copy()
        for _ in range(3):
            client_data.datasets()
            assert client_data.client_ids == client_ids_copy

    @pytest.mark.parametrize('seed', GOOD_SEEDS)
    def test_datasets_does_not_raise_on_expected_random_seed(self, seed):
        next(create_concrete_client_data().datasets(seed=seed))

    @pytest.mark.parametrize('seed', BAD_SEEDS)
    def test_datasets_raises_on_unexpected_random_seed(self, seed):
        with pytest.raises(cd.InvalidRandomSeedError):
            next(create_concrete_client_data().datasets(seed=seed))

    def test_create_tf_dataset_from_all_clients(self):
        dataset = create_concrete_client_data().create_tf_dataset_from_all_clients()
        assert sorted(dataset.as_numpy_iterator()) == [0, 0, 0, 1, 1, 2]

    @pytest.mark.parametrize('seed', GOOD_SEEDS)
    def test_create_from_all_does_not_raise_on_expected_random_seed(self, seed):
        create_concrete_client_data().create_tf_dataset_from_all_clients(seed=seed)

    @pytest.mark.parametrize('seed', BAD_SEEDS)
    def test_create_from_all_raises_on_unexpected_random_seed(self, seed):
        with pytest.raises(cd.InvalidRandomSeedError):
            create_concrete_client_data().create_tf_dataset_from_all_clients(seed=seed)

    def test_dataset_from_large_client_list(self):
        client_ids = [str(x) for x in range(1_000_000)]
        client_data = cd.ClientData.from_clients_and_tf_fn(
            client_ids=client_ids, serializable_dataset_fn=lambda _: tf.data.Dataset.range(100)
        )
        client_data.create_tf_dataset_from_all_clients(seed=42)


class TestPreprocessClientData:
    def test_preprocess_creates_expected_client_datasets(self):
        client_data = create_concrete_client_data()
        pre = client_data.preprocess(lambda ds: ds.map(lambda x: 2 * x))
        for client_id in client_data.client_ids:
            expected = [2 * a for a in range(int(client_id))]
            assert list(pre.create_tf_dataset_for_client(client_id).as_numpy_iterator()) == expected

    def test_preprocess_with_take_one(self):
        client_data = create_concrete_client_data()
        pre = client_data.preprocess(lambda x: x.take(1))
        for client_id in client_data.client_ids:
            assert dataset_length(pre.create_tf_dataset_for_client(client_id)) == 1
        assert len(client_data.client_ids) == dataset_length(
            pre.create_tf_dataset_from_all_clients()
        )

    def test_preprocess_creates_expected_client_datasets_with_dataset_comp(self, tff_stack):
        client_data = create_concrete_client_data()
        pre = client_data.preprocess(lambda ds: ds.map(lambda x: 2 * x))
        for client_id in client_data.client_ids:
            actual = pre.dataset_computation(client_id)
            assert list(actual.as_numpy_iterator()) == [2 * a for a in range(int(client_id))]

    def test_preprocess_creates_expected_amalgamated_dataset(self):
        pre = create_concrete_client_data().preprocess(lambda ds: ds.map(lambda x: 2 * x))
        assert sorted(pre.create_tf_dataset_from_all_clients().as_numpy_iterator()) == [
            0,
            0,
            0,
            2,
            2,
            4,
        ]

    def test_preprocess_raises_on_tff_computation(self):
        @tff.tf_computation
        def foo():
            return 1

        with pytest.raises(cd.IncompatiblePreprocessFnError):
            create_concrete_client_data().preprocess(foo)
