"""`train_model` and `EvaluationManager` end to end: real processes on each of its stacks (tests/tff/conftest.py: stacks_for).

Not a port (TFF's program-logic tests use mocks only): a FedAvg process of
TFF's `LinearRegression` trained by `train_model` in a
`NativeFederatedContext` over the stack, with `DatasetDataSource` client
data, a `FileProgramStateManager` (the data iterator saved as bytes), memory
release managers and an `EvaluationManager` of `build_fed_eval` processes;
then resumed by a second call that runs one more round.
"""

import asyncio
import datetime

import numpy as np
import pytest

from simharness.learning import algorithms, optimizers
from simharness.learning.programs import EvaluationManager, ProgramState, train_model
from simharness.program import (
    DatasetDataSource,
    DatasetDataSourceIterator,
    FileProgramStateManager,
    MemoryReleaseManager,
)
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import LinearRegression


@pytest.fixture(scope='module')
def processes():
    train = algorithms.build_weighted_fed_avg(
        LinearRegression, client_optimizer_fn=optimizers.build_sgdm(learning_rate=0.1)
    )
    evaluation = algorithms.build_fed_eval(LinearRegression)
    return train, evaluation


def test_train_model_trains_evaluates_and_resumes(native_tff_stack, processes, tmp_path):
    train_process, eval_process = processes
    data_source = DatasetDataSource(utils.linear_datasets(num_clients=4))
    state_manager = FileProgramStateManager(tmp_path / 'train')
    train_metrics, model_output = MemoryReleaseManager(), MemoryReleaseManager()
    per_round_eval_metrics, total_eval_metrics = MemoryReleaseManager(), MemoryReleaseManager()
    evaluation_manager = EvaluationManager(
        data_source=data_source,
        aggregated_metrics_manager=total_eval_metrics,
        create_state_manager_fn=lambda name: FileProgramStateManager(tmp_path / name),
        create_process_fn=lambda name: (eval_process, per_round_eval_metrics),
        cohort_size=2,
        duration=datetime.timedelta(0),
    )

    def train(total_rounds):
        return asyncio.run(
            train_model(
                train_process=train_process,
                train_data_source=data_source,
                train_per_round_clients=2,
                train_total_rounds=total_rounds,
                program_state_manager=state_manager,
                model_output_manager=model_output,
                train_metrics_manager=train_metrics,
                evaluation_manager=evaluation_manager,
                evaluation_periodicity=10,
            )
        )  # only the last round of each call

    train(2)
    assert asyncio.run(state_manager.get_versions()) == [0, 1, 2]
    released = train_metrics.values()
    assert list(released) == [1, 2]
    # client_work/train moved to model_metrics; LinearRegression's metrics.
    assert 'model_metrics' in released[1] and 'train' not in released[1]['client_work']
    assert int(released[2]['model_metrics']['num_examples']) in (6, 8, 10)  # 2 of 3, 5, 3, 5
    assert list(model_output.values()) == ['training_checkpoint_round_2']
    # The last round evaluated: one evaluation round (duration 0), released under round 2.
    assert list(total_eval_metrics.values()) == [2]
    assert list(per_round_eval_metrics.values()) == [2]
    assert set(total_eval_metrics.values()[2]['model_metrics']) >= {'loss', 'num_examples'}
    # A finished evaluation leaves no state behind.
    assert not any((tmp_path / 'evaluation_of_train_round_00002').iterdir())

    trained, _ = asyncio.run(
        state_manager.load_latest(
            ProgramState(
                asyncio.run(_materialized_initialize(train_process)), 0, 0, data_source.iterator()
            )
        )
    )
    assert int(trained.round_number) == 2
    assert isinstance(trained.data_iterator, DatasetDataSourceIterator)
    assert trained.data_iterator == data_source.iterator()  # saved and rebuilt from bytes
    assert not np.allclose(trained.state.global_model_weights.trainable[0], 0.0)

    # Resumed: only round 3 runs.
    train(3)
    assert asyncio.run(state_manager.get_versions())[-1] == 3
    assert list(train_metrics.values()) == [1, 2, 3]
    assert list(total_eval_metrics.values()) == [2, 3]


async def _materialized_initialize(process):
    from simharness.program import materialize_value

    return await materialize_value(process.initialize())
