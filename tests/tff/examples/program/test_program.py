"""TFF 0.88's federated program example (``examples/program/program.py``), run end to end.

The example's three modules are copied beside this test (``program.py``,
``program_logic.py``, ``computations.py``, and its own test as
``test_program_logic.py``) with ``import tensorflow_federated as tff`` renamed
``import simharness as tff`` and one patch: ``from examplesprogram import ...`` (its
Bazel package) is ``from tests.tff.examples.program import ...`` (``# PATCHED``).

Here the program's ``main`` runs as its README says (``--output_dir``): on the native
platform context it installs itself, 3 client datasets ``range(10)``, 1 client a round,
10 rounds. Checked: the program state its `FileProgramStateManager` saved (the server
state is the running sum, 45 a round), the evaluation metrics its
`CSVFileReleaseManager` released (filtered to ``total_sum``), the TensorBoard summaries,
and the training metrics logged by its `LoggingReleaseManager`s; then a run stopped
after 4 rounds and started again resumes from round 5 through the program's own state
manager, and ends with the same state as the uninterrupted run.
"""

import asyncio
import csv
import logging
import os
import random

import pytest
import tensorflow as tf
from absl import flags

import simharness as tff
from tests.tff.examples.program import computations, program, program_logic

ROUND_SUM = sum(range(10))  # one client a round, each dataset is range(10)


@pytest.fixture
def output_dir(tmp_path):
    flags.FLAGS.output_dir = str(tmp_path)
    yield tmp_path
    flags.FLAGS.output_dir = None
    # `main` installs a default context of its own; back to simharness's.
    tff.framework.set_default_context(None)


def _saved_state(output_dir):
    manager = tff.program.FileProgramStateManager(os.path.join(output_dir, 'program_state'))
    iterator = tff.program.DatasetDataSource(
        [tf.data.Dataset.range(10, output_type=tf.int32)]).iterator()
    structure = program_logic._ProgramState(state=0, round_num=0, iterator=iterator)
    return asyncio.run(manager.load_latest(structure))


def _released_train_keys(caplog):
    keys = []
    for record in caplog.records:
        if record.getMessage().startswith('Released value (key') and 'total_sum' in \
                record.getMessage():
            keys.append(record.args[0])
    return keys


def _run_main(caplog):
    caplog.clear()
    with caplog.at_level(logging.INFO):
        program.main(['program'])


def test_the_program_trains_saves_and_releases(output_dir, caplog):
    _run_main(caplog)

    state, version = _saved_state(output_dir)
    assert version == 10
    assert int(state.round_num) == 10
    assert int(state.state) == 10 * ROUND_SUM

    with open(os.path.join(output_dir, 'evaluation_metrics.csv'), newline='') as f:
        rows = list(csv.DictReader(f))
    assert rows == [{'key': '11', 'total_sum': str(ROUND_SUM)}]

    summary_dir = os.path.join(output_dir, 'summary')
    assert any(name.startswith('events.out.tfevents') for _, _, names in os.walk(summary_dir)
               for name in names)

    # Training metrics of rounds 1..10 and the evaluation's (key 11), logged.
    assert sorted(set(_released_train_keys(caplog))) == list(range(1, 12))


def test_the_program_resumes_from_its_saved_state(output_dir, caplog, monkeypatch):
    monkeypatch.setattr(program, '_TOTAL_ROUNDS', 4)
    _run_main(caplog)
    state, version = _saved_state(output_dir)
    assert (version, int(state.round_num), int(state.state)) == (4, 4, 4 * ROUND_SUM)

    monkeypatch.setattr(program, '_TOTAL_ROUNDS', 10)
    _run_main(caplog)
    # Only rounds 5..10 were trained again (and the evaluation released as key 11).
    assert sorted(set(_released_train_keys(caplog))) == list(range(5, 12))
    state, version = _saved_state(output_dir)
    assert (version, int(state.round_num), int(state.state)) == (10, 10, 10 * ROUND_SUM)

    with open(os.path.join(output_dir, 'evaluation_metrics.csv'), newline='') as f:
        rows = list(csv.DictReader(f))
    # The first run's evaluation (key 5) and the second's (key 11).
    assert rows == [{'key': '5', 'total_sum': str(ROUND_SUM)},
                    {'key': '11', 'total_sum': str(ROUND_SUM)}]


def _train_on(stack_registry, stack_name):
    from simharness.context import AsyncExecutionContext
    from simharness.tensorflow import eager_values_to_numpy, transform_result
    datasets = [tf.data.Dataset.range(10, output_type=tf.int32).map(lambda x: x * (i + 1))
                for i in range(3)]
    train_metrics = tff.program.MemoryReleaseManager()
    model_output = tff.program.MemoryReleaseManager()
    random.seed(7)  # the data source draws its clients with Python's `random`, as TFF's
    with stack_registry.open(stack_name) as handle:
        async_context = AsyncExecutionContext(handle.factory, transform_args=eager_values_to_numpy,
                                              transform_result=transform_result)
        try:
            with tff.framework.get_context_stack().install(
                    tff.program.NativeFederatedContext(async_context)):
                asyncio.run(program_logic.train_federated_model(
                    initialize=computations.initialize, train=computations.train,
                    train_data_source=tff.program.DatasetDataSource(datasets),
                    evaluation=computations.evaluation,
                    evaluation_data_source=tff.program.DatasetDataSource(datasets),
                    total_rounds=3, num_clients=2, train_metrics_manager=train_metrics,
                    model_output_manager=model_output))
        finally:
            async_context.close()
    metrics = {key: int(value[computations.METRICS_TOTAL_SUM])
               for key, value in train_metrics.values().items()}
    return metrics, int(model_output.values()[None])


def test_the_program_logic_gives_the_same_results_on_the_thread_and_process_stacks(
        stack_registry):
    results = {name: _train_on(stack_registry, name) for name in ('local', 'process-2')}
    assert results['local'] == results['process-2']
    metrics, final_state = results['local']
    assert sorted(metrics) == [1, 2, 3]
    assert final_state == sum(metrics.values())
