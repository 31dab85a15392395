"""End to end: a `tff.simulation.baselines` task trained by TFF's FedAvg, as a
google-research/federated training script uses one (``task.model_fn``,
``task.datasets.train_data.preprocess(task.datasets.train_preprocess_fn)``,
``task.datasets.get_centralized_test_data()``): two rounds of FedAvg on the default
stack, and a script of the google-research shape (`sample_train_clients` each round,
`run_training_process` with a centralized `build_fed_eval` evaluation) on process-2.
"""

import collections

import numpy as np
import pytest

import simharness as tff


def _client(labels, seed):
    rng = np.random.default_rng(seed)
    pixels = rng.random((len(labels), 28, 28)).astype(np.float32)
    return collections.OrderedDict(label=np.asarray(labels, np.int32), pixels=pixels)


@pytest.mark.slow  # ~14 s: traces FedAvg's computations over a Keras model
def test_emnist_task_trains_two_rounds_of_fed_avg():
    data = tff.simulation.datasets.TestClientData(
        {'c0': _client([0, 1, 2, 3, 4], 0), 'c1': _client([5, 6, 7], 1), 'c2': _client([8, 9], 2)}
    )
    task = tff.simulation.baselines.emnist.create_character_recognition_task_from_datasets(
        tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=2),
        None,
        '2nn',
        True,
        data,
        data,
        debug_seed=0,
    )
    process = tff.learning.algorithms.build_weighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.05),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
    )
    train_data = task.datasets.train_data.preprocess(task.datasets.train_preprocess_fn)
    state = process.initialize()
    losses = []
    for round_num in range(2):
        clients = [
            train_data.create_tf_dataset_for_client(c)
            for c in sorted(train_data.client_ids)[round_num:]
        ]
        result = process.next(state, clients)
        state = result.state
        train = result.metrics['client_work']['train']
        assert train['num_examples'] == (10 if round_num == 0 else 5)
        losses.append(train['loss'])
    assert all(np.isfinite(losses))

    # The trained weights evaluated centrally, as the research scripts do.
    weights = process.get_model_weights(state)
    keras_model = (
        tff.simulation.baselines.emnist.char_recognition_tasks._get_character_recognition_model(
            '2nn', True
        )
    )
    keras_model.set_weights(list(weights.trainable) + list(weights.non_trainable))
    x, y = next(iter(task.datasets.get_centralized_test_data()))
    probs = keras_model(x).numpy()
    assert probs.shape == (10, 10) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert sorted(y.numpy().tolist()) == list(range(10))


@pytest.mark.slow  # ~24 s: FedAvg and FedEval traced, run on two worker processes
@pytest.mark.process
def test_research_script_on_the_process_stack(stack_registry):
    """A google-research/federated-style script: clients drawn each round by
    `sample_train_clients`, `run_training_process` with a centralized evaluation."""
    data = tff.simulation.datasets.TestClientData(
        {f'c{i}': _client([(i + j) % 10 for j in range(3 + i % 3)], i) for i in range(6)}
    )
    task = tff.simulation.baselines.emnist.create_character_recognition_task_from_datasets(
        tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=4),
        tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=8),
        '2nn',
        True,
        data,
        data,
        debug_seed=0,
    )
    with stack_registry.open('process-2'):
        process = tff.learning.algorithms.build_weighted_fed_avg(
            task.model_fn,
            client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.05),
        )
        evaluation = tff.learning.algorithms.build_fed_eval(task.model_fn)

        def evaluation_fn(state, datasets):
            eval_state = evaluation.set_model_weights(
                evaluation.initialize(), process.get_model_weights(state)
            )
            return evaluation.next(eval_state, datasets).metrics

        release = tff.program.MemoryReleaseManager()
        tff.simulation.run_training_process(
            process,
            training_selection_fn=lambda r: task.datasets.sample_train_clients(
                num_clients=3, random_seed=r
            ),
            total_rounds=2,
            evaluation_fn=evaluation_fn,
            evaluation_selection_fn=lambda r: [task.datasets.get_centralized_test_data()],
            metrics_managers=[release],
        )
    released = dict(release.values())
    assert sorted(released) == [0, 1, 2]
    eval_train = released[2]['evaluation/client_work']['eval']['current_round_metrics']
    assert eval_train['num_examples'] == sum(3 + i % 3 for i in range(6))
    assert np.isfinite(released[2]['client_work']['train']['loss'])
