"""Port of TFF's ``tensorflow_federated/python/simulation/training_loop_test.py``.

No case left out (TFF mocks ``absl.logging.info`` around its mocked clock; we
silence our module logger instead). Added: a real process (federated
computations) trained from client ids with `build_uniform_sampling_fn` and a
composed dataset computation, on every stack, saving state and releasing
metrics through simharness.program's file managers, then resumed.
"""

import collections
import logging
from unittest import mock

import numpy as np
import pytest

import simharness as tff
from simharness.simulation import training_loop
from simharness.templates import IterativeProcess

ROUNDS = [0, 1, 2, 10]
EVAL_CASES = [(0, 1), (1, 1), (1, 2), (2, 1), (2, 2), (10, 1), (10, 5)]


def _process(next_return=('update', {'metric': 1.0})):
    training_process = mock.create_autospec(IterativeProcess)
    training_process.initialize.return_value = 'initialize'
    training_process.next.return_value = next_return
    return training_process


def _expected_next_calls(total_rounds):
    return [
        mock.call('initialize' if r == 1 else 'update', [0]) for r in range(1, total_rounds + 1)
    ]


@pytest.mark.parametrize(
    'next_return',
    [('update', {'metric': 1.0}), collections.OrderedDict(state='update', metrics={'metric': 1.0})],
    ids=['tuple_next', 'odict_next'],
)
@pytest.mark.parametrize('total_rounds', ROUNDS)
def test_training_fns_called(total_rounds, next_return):
    training_process = _process(next_return)
    training_selection_fn = mock.MagicMock(return_value=[0])
    training_loop.run_training_process(
        training_process=training_process,
        training_selection_fn=training_selection_fn,
        total_rounds=total_rounds,
    )
    training_process.initialize.assert_called_once()
    assert training_selection_fn.call_args_list == [
        mock.call(r) for r in range(1, total_rounds + 1)
    ]
    assert training_process.next.call_args_list == _expected_next_calls(total_rounds)


@pytest.mark.parametrize('total_rounds, rounds_per_evaluation', EVAL_CASES)
def test_evaluation_fns_called(total_rounds, rounds_per_evaluation):
    training_process = _process()
    evaluation_fn = mock.create_autospec(tff.Computation, return_value={'metric': 1.0})
    evaluation_selection_fn = mock.MagicMock(return_value=[0])
    training_loop.run_training_process(
        training_process=training_process,
        training_selection_fn=mock.MagicMock(),
        total_rounds=total_rounds,
        evaluation_fn=evaluation_fn,
        evaluation_selection_fn=evaluation_selection_fn,
        rounds_per_evaluation=rounds_per_evaluation,
    )
    rounds = [0] + [r for r in range(1, total_rounds + 1) if r % rounds_per_evaluation == 0]
    assert evaluation_selection_fn.call_args_list == [mock.call(r) for r in rounds]
    assert evaluation_fn.call_args_list == [
        mock.call('initialize' if r == 0 else 'update', [0]) for r in rounds
    ]


@pytest.mark.parametrize(
    'program_state, version',
    [(None, 0), ('update', 1)],
    ids=['without_program_state', 'with_program_state'],
)
@pytest.mark.parametrize('total_rounds, rounds_per_saving', EVAL_CASES)
def test_program_state_manager_called_without_existing_program_state(
    total_rounds, rounds_per_saving, program_state, version
):
    program_state_manager = mock.AsyncMock()
    program_state_manager.load_latest.return_value = (program_state, version)
    training_loop.run_training_process(
        training_process=_process(),
        training_selection_fn=mock.MagicMock(),
        total_rounds=total_rounds,
        program_state_manager=program_state_manager,
        rounds_per_saving_program_state=rounds_per_saving,
    )
    program_state_manager.load_latest.assert_called_once()
    expected = [mock.call('initialize', 0)] if version == 0 else []
    expected += [
        mock.call('update', r)
        for r in range(version + 1, total_rounds + 1)
        if r % rounds_per_saving == 0
    ]
    assert program_state_manager.save.call_args_list == expected


@pytest.mark.parametrize(
    'version, total_rounds',
    [(0, 1), (0, 3), (1, 0), (1, 1), (2, 0), (2, 2), (2, 3), (2, 5), (5, 2)],
)
def test_program_state_manager_called_with_existing_program_state(version, total_rounds):
    program_state_manager = mock.AsyncMock()
    program_state_manager.load_latest.return_value = ('program_state', version)
    training_loop.run_training_process(
        training_process=_process(),
        training_selection_fn=mock.MagicMock(),
        total_rounds=total_rounds,
        program_state_manager=program_state_manager,
        rounds_per_saving_program_state=1,
    )
    program_state_manager.load_latest.assert_called_once()
    assert program_state_manager.save.call_args_list == [
        mock.call('update', r) for r in range(version + 1, total_rounds + 1)
    ]


@pytest.mark.parametrize('total_rounds', ROUNDS)
def test_metrics_managers_called_without_evaluation(total_rounds):
    managers = [mock.AsyncMock() for _ in range(3)]
    training_loop.run_training_process(
        training_process=_process(),
        training_selection_fn=mock.MagicMock(),
        total_rounds=total_rounds,
        metrics_managers=managers,
    )
    expected = [
        mock.call(
            collections.OrderedDict(
                [('metric', 1.0), ('training_time_in_seconds', mock.ANY), ('round_number', r)]
            ),
            key=r,
        )
        for r in range(1, total_rounds + 1)
    ]
    for m in managers:
        assert m.release.call_args_list == expected


@pytest.mark.parametrize('total_rounds, rounds_per_evaluation', EVAL_CASES)
def test_metrics_managers_called_with_evaluation(total_rounds, rounds_per_evaluation):
    managers = [mock.AsyncMock() for _ in range(3)]
    training_loop.run_training_process(
        training_process=_process(),
        training_selection_fn=mock.MagicMock(),
        total_rounds=total_rounds,
        evaluation_fn=mock.MagicMock(return_value={'metric': 1.0}),
        evaluation_selection_fn=mock.MagicMock(),
        rounds_per_evaluation=rounds_per_evaluation,
        metrics_managers=managers,
    )
    evaluation = [('evaluation/metric', 1.0), ('evaluation/evaluation_time_in_seconds', mock.ANY)]
    expected = [mock.call(collections.OrderedDict(evaluation), key=0)]
    for r in range(1, total_rounds + 1):
        training = [('metric', 1.0), ('training_time_in_seconds', mock.ANY), ('round_number', r)]
        expected.append(
            mock.call(
                collections.OrderedDict(
                    training + (evaluation if r % rounds_per_evaluation == 0 else [])
                ),
                key=r,
            )
        )
    for m in managers:
        assert m.release.call_args_list == expected


def test_metrics_managers_called_with_training_and_evaluation_time_10():
    manager = mock.AsyncMock()
    with (
        mock.patch('time.time') as mock_time,
        mock.patch.object(training_loop, '_LOG', logging.getLogger('silenced')),
    ):
        mock_time.side_effect = [0.0, 10.0] * 3
        training_loop.run_training_process(
            training_process=_process(),
            training_selection_fn=mock.MagicMock(),
            total_rounds=1,
            evaluation_fn=mock.MagicMock(return_value={'metric': 1.0}),
            evaluation_selection_fn=mock.MagicMock(),
            metrics_managers=[manager],
        )
    assert manager.release.call_args_list == [
        mock.call(
            collections.OrderedDict(
                [('evaluation/metric', 1.0), ('evaluation/evaluation_time_in_seconds', 10.0)]
            ),
            key=0,
        ),
        mock.call(
            collections.OrderedDict(
                [
                    ('metric', 1.0),
                    ('training_time_in_seconds', 10.0),
                    ('round_number', 1),
                    ('evaluation/metric', 1.0),
                    ('evaluation/evaluation_time_in_seconds', 10.0),
                ]
            ),
            key=1,
        ),
    ]


def test_runs_inside_a_running_event_loop():
    import asyncio

    async def main():
        manager = mock.AsyncMock()
        training_loop.run_training_process(
            training_process=_process(),
            training_selection_fn=mock.MagicMock(),
            total_rounds=2,
            metrics_managers=[manager],
        )
        return manager.release.call_count

    assert asyncio.run(main()) == 2


def test_real_process_from_client_ids(tff_stack, tmp_path):
    client_data = tff.simulation.datasets.TestClientData(
        {f'c{i}': collections.OrderedDict(x=np.full(i + 1, float(i), np.float32)) for i in range(6)}
    )
    element = client_data.element_type_structure

    @tff.tf_computation(tff.SequenceType(element))
    def client_total(ds):
        return ds.reduce(np.float32(0), lambda acc, e: acc + e['x'])

    @tff.federated_computation()
    def initialize():
        return tff.federated_value(np.float32(0), tff.SERVER)

    @tff.federated_computation(
        tff.type_at_server(np.float32), tff.type_at_clients(tff.SequenceType(element))
    )
    def next_fn(state, datasets):
        total = tff.federated_sum(tff.federated_map(client_total, datasets))
        add = tff.tf_computation(lambda a, b: a + b, np.float32, np.float32)
        new_state = tff.federated_map(add, tff.federated_zip((state, total)))
        return new_state, tff.federated_zip(collections.OrderedDict(total=total))

    process = tff.simulation.compose_dataset_computation_with_iterative_process(
        client_data.dataset_computation, IterativeProcess(initialize, next_fn)
    )
    sample = tff.simulation.build_uniform_sampling_fn(client_data.client_ids, random_seed=3)
    state_manager = tff.program.FileProgramStateManager(str(tmp_path / 'state'))
    csv = tff.program.CSVFileReleaseManager(str(tmp_path / 'metrics.csv'))
    state = training_loop.run_training_process(
        process,
        lambda r: sample(r, 3),
        total_rounds=3,
        program_state_manager=state_manager,
        metrics_managers=[csv],
    )
    want = 0.0
    for r in range(1, 4):
        want += sum(int(c[1:]) * (int(c[1:]) + 1) for c in sample(r, 3))
    assert float(state) == want
    text = (tmp_path / 'metrics.csv').read_text().splitlines()
    assert text[0].split(',')[0] == 'key' and len(text) == 4
    resumed = training_loop.run_training_process(
        process, lambda r: sample(r, 3), total_rounds=4, program_state_manager=state_manager
    )
    want += sum(int(c[1:]) * (int(c[1:]) + 1) for c in sample(4, 3))
    assert float(resumed) == want


def test_the_main_thread_keeps_its_event_loop():
    # TFF runs the loop's program-state and release calls on `asyncio.get_event_loop()`: a
    # program may use that loop afterwards (e.g. to read its program state manager).
    import asyncio

    from simharness.program import MemoryReleaseManager

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        released = MemoryReleaseManager()
        training_loop.run_training_process(
            training_process=_process(),
            training_selection_fn=lambda r: [0],
            total_rounds=2,
            metrics_managers=[released],
        )
        assert asyncio.get_event_loop() is loop

        async def keys():
            return sorted(released.values())

        assert loop.run_until_complete(keys()) == [1, 2]  # as TFF 0.87
    finally:
        asyncio.set_event_loop(None)
        loop.close()
