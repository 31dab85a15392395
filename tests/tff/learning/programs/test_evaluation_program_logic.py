"""Port of TFF's ``tensorflow_federated/python/learning/programs/evaluation_program_logic_test.py``.

All of TFF's cases, with mock processes and state managers in a
`NativeFederatedContext`: extract_and_rewrap_metrics (incl. a structure of
value references), EvaluationManager (resume nothing, start evaluations,
record finished ones, concurrent records, resume previous evaluations, a
failed evaluation raises) and _run_evaluation (not a learning process, no
zero state, end time passed, future end time, resumed round numbers and end
time). In the not-a-learning-process case the client data are real empty
datasets (TFF passes its mock iterator's selection, which only its native
context lets through). Added: a path through a non-mapping is a KeyError;
an evaluation stopped mid-way resumes from real FileProgramStateManager
files in a new manager.
"""

import asyncio
import collections
import datetime
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.core import types as computation_types
from simharness.learning.models import model_weights
from simharness.learning.programs import evaluation_program_logic
from simharness.learning.templates import composers, learning_process
from simharness.program import data_source, file_program_state_manager, native_platform
from simharness.program import release_manager
from simharness.templates import IterativeProcess


def run(coro):
    return asyncio.run(coro)


class _NumpyMatcher:
    """Equal to an ndarray holding `value` (mock call arguments)."""

    def __init__(self, value):
        self._value = value

    def __eq__(self, other) -> bool:
        if not isinstance(other, np.ndarray):
            return False
        return bool(np.all(self._value == other))

    def __repr__(self) -> str:
        return f'_NumpyMatcher({self._value})'


# ------------------------------------------------------------------ extract_and_rewrap_metrics


def test_extracts_substructure_adds_prefix():
    test_structure = collections.OrderedDict(
        test=collections.OrderedDict(
            path=collections.OrderedDict(test_a=[1, 2, 3], test_b=10.0),
            other=collections.OrderedDict(test_one=1.0, test_two=2.0),
        )
    )
    extracted = evaluation_program_logic.extract_and_rewrap_metrics(
        test_structure, path=('test', 'path')
    )
    assert dict(extracted) == {  # TFF's assertAllClose ignores the order of the keys
        evaluation_program_logic.MODEL_METRICS_PREFIX: collections.OrderedDict(
            test_a=[1, 2, 3], test_b=10.0
        ),
        'test': collections.OrderedDict(other=collections.OrderedDict(test_one=1.0, test_two=2.0)),
    }
    # The input is left as it was.
    assert set(test_structure['test']) == {'path', 'other'}


def test_no_path_raises_error():
    with pytest.raises(ValueError, match='`path` is empty'):
        evaluation_program_logic.extract_and_rewrap_metrics(
            collections.OrderedDict(foo=1, bar=2), path=()
        )


def test_path_does_not_exist_in_structure_fails():
    with pytest.raises(KeyError, match=r'\[test\]'):
        evaluation_program_logic.extract_and_rewrap_metrics(
            collections.OrderedDict(foo=1, bar=2), path=('test', 'bad_path')
        )
    with pytest.raises(KeyError, match=r'\[bad_path\]'):
        evaluation_program_logic.extract_and_rewrap_metrics(
            collections.OrderedDict(foo=collections.OrderedDict(bar=2)), path=('foo', 'bad_path')
        )


def test_path_through_a_non_mapping_fails():
    with pytest.raises(KeyError, match=r'\[foo\] .* is a tuple, not a mapping'):
        evaluation_program_logic.extract_and_rewrap_metrics(
            collections.OrderedDict(foo=()), path=('foo', 'bar')
        )


def test_federated_value_structure():
    async def body():
        def awaitable_value(value, value_type):
            async def _value():
                return value

            return native_platform.NativeValueReference(asyncio.create_task(_value()), value_type)

        test_value = collections.OrderedDict(
            a=awaitable_value('foo', computation_types.TensorType(np.str_)),
            b=collections.OrderedDict(
                x=awaitable_value('bar', computation_types.TensorType(np.str_)),
                z=awaitable_value(1.0, computation_types.TensorType(np.float32)),
            ),
        )
        out = evaluation_program_logic.extract_and_rewrap_metrics(
            metrics_structure=test_value, path=['b']
        )
        assert set(out) == {'a', evaluation_program_logic.MODEL_METRICS_PREFIX}
        assert await out[evaluation_program_logic.MODEL_METRICS_PREFIX]['z'].get_value() == 1.0

    run(body())


# ------------------------------------------------------------------ mocks


def _create_mock_datasource():
    mock_datasource = mock.create_autospec(
        data_source.FederatedDataSource, instance=True, spec_set=True
    )
    mock_datasource.iterator.side_effect = lambda *a, **k: mock.create_autospec(
        data_source.FederatedDataSourceIterator, instance=True, spec_set=True
    )
    return mock_datasource


def _create_per_round_eval_metrics_release_call(*, key: int):
    return mock.call(
        collections.OrderedDict(
            [
                ('distributor', ()),
                ('client_work', mock.ANY),
                ('aggregator', mock.ANY),
                ('finalizer', ()),
                (evaluation_program_logic.MODEL_METRICS_PREFIX, mock.ANY),
            ]
        ),
        key=key,
    )


def _create_mock_eval_process():
    mock_process = mock.create_autospec(
        learning_process.LearningProcess, instance=True, spec_set=True
    )
    empty_state = composers.LearningAlgorithmState(
        global_model_weights=(), distributor=(), client_work=(), aggregator=(), finalizer=()
    )
    mock_process.initialize.return_value = empty_state
    mock_process.next.return_value = learning_process.LearningProcessOutput(
        empty_state,
        collections.OrderedDict(
            distributor=(),
            client_work=collections.OrderedDict(
                eval=collections.OrderedDict(
                    current_round_metrics=collections.OrderedDict(),
                    total_rounds_metrics=collections.OrderedDict(),
                )
            ),
            aggregator=(),
            finalizer=(),
        ),
    )
    return mock_process


def _state_manager_mock(spec_set=True):
    return mock.create_autospec(
        file_program_state_manager.FileProgramStateManager, instance=True, spec_set=spec_set
    )


def _release_manager_mock():
    return mock.create_autospec(release_manager.ReleaseManager, instance=True, spec_set=True)


def _manager(create_state_manager, create_process_fn, duration=None):
    kwargs = {} if duration is None else dict(duration=duration)
    return evaluation_program_logic.EvaluationManager(
        data_source=mock.create_autospec(
            data_source.FederatedDataSource, instance=True, spec_set=True
        ),
        aggregated_metrics_manager=_release_manager_mock(),
        create_state_manager_fn=create_state_manager,
        create_process_fn=create_process_fn,
        cohort_size=10,
        **kwargs,
    )


# ------------------------------------------------------------------ EvaluationManager


def test_resume_nothing(native_context):
    mock_meta_eval_manager = _state_manager_mock()
    mock_meta_eval_manager.load_latest.return_value = (None, 0)
    mock_create_state_manager = mock.Mock(side_effect=[mock_meta_eval_manager])
    mock_create_process_fn = mock.Mock()
    manager = _manager(mock_create_state_manager, mock_create_process_fn)
    assert manager.cohort_size == 10
    assert manager.duration == datetime.timedelta(hours=24)

    async def body():
        await manager.resume_from_previous_state()
        assert not manager._pending_tasks
        await manager.wait_for_evaluations_to_finish()
        assert not manager._pending_tasks

    run(body())
    mock_create_process_fn.assert_not_called()
    assert mock_create_state_manager.call_args_list == [
        mock.call(evaluation_program_logic._EVAL_MANAGER_KEY)
    ]
    mock_meta_eval_manager.load_latest.assert_called_once()


def test_start_evaluations(native_context):
    mock_meta_eval_manager = _state_manager_mock()
    mock_meta_eval_manager.load_latest.side_effect = [
        ((np.asarray([]).astype(np.int32), np.asarray([]).astype(np.int32)), 0)
    ]
    test_train_rounds = [5, 15]
    test_train_times = [
        int(datetime.datetime(2022, 11, 2, 10, 7).timestamp()),
        int(datetime.datetime(2022, 11, 2, 10, 15).timestamp()),
    ]
    mock_eval_managers = [_state_manager_mock(), _state_manager_mock()]
    for mock_eval_manager in mock_eval_managers:
        mock_eval_manager.load_latest.side_effect = [
            (mock.create_autospec(composers.LearningAlgorithmState, instance=True), 0)
        ]
    mock_create_state_manager = mock.Mock(side_effect=[mock_meta_eval_manager] + mock_eval_managers)
    processes = [_create_mock_eval_process(), _create_mock_eval_process()]
    metrics_managers = [_release_manager_mock(), _release_manager_mock()]
    mock_create_process_fn = mock.Mock(side_effect=list(zip(processes, metrics_managers)))
    manager = _manager(
        mock_create_state_manager,
        mock_create_process_fn,
        duration=datetime.timedelta(milliseconds=10),
    )
    mock_create_state_manager.assert_called_once_with(evaluation_program_logic._EVAL_MANAGER_KEY)
    mock_create_state_manager.reset_mock()

    async def body():
        assert not manager._pending_tasks
        await manager.resume_from_previous_state()
        assert not manager._pending_tasks
        mock_create_process_fn.assert_not_called()
        test_model_weights = model_weights.ModelWeights([], [])
        for train_round, train_time in zip(test_train_rounds, test_train_times):
            await manager.start_evaluation(
                train_round=train_round,
                start_timestamp_seconds=train_time,
                model_weights=test_model_weights,
            )
            eval_name = evaluation_program_logic._EVAL_NAME_PATTERN.format(round_num=train_round)
            assert mock_create_state_manager.call_args_list == [mock.call(eval_name)]
            mock_create_state_manager.reset_mock()
            assert mock_create_process_fn.call_args_list == [mock.call(eval_name)]
            mock_create_process_fn.reset_mock()
        # One or two pending: the first may have finished meanwhile.
        assert manager._pending_tasks
        await manager.wait_for_evaluations_to_finish()
        assert not manager._pending_tasks

    run(body())
    assert mock_meta_eval_manager.save.call_args_list == [
        mock.call(
            (_NumpyMatcher(test_train_rounds[0]), _NumpyMatcher([test_train_times[0]])), version=1
        ),  # first started
        mock.call((_NumpyMatcher([]), _NumpyMatcher([[]])), version=2),  # first ended
        mock.call(
            (_NumpyMatcher(test_train_rounds[1]), _NumpyMatcher([test_train_times[1]])), version=3
        ),  # second started
        mock.call((_NumpyMatcher([]), _NumpyMatcher([[]])), version=4),  # second ended
    ]
    for mock_eval_manager in mock_eval_managers:
        assert mock_eval_manager.save.call_args_list[0] == mock.call(mock.ANY, version=0)
        mock_eval_manager.remove_all.assert_called_once()


def _manager_with_two_in_flight():
    mock_meta_eval_manager = _state_manager_mock()
    manager = _manager(
        mock.Mock(side_effect=[mock_meta_eval_manager]),
        mock.Mock(),
        duration=datetime.timedelta(milliseconds=10),
    )
    # The state set directly: no tasks of resumed evaluations.
    manager._evaluating_training_checkpoints = np.asarray([5, 15]).astype(np.int32)
    manager._evaluation_start_timestamp_seconds = np.asarray(
        [
            datetime.datetime(2022, 10, 28, 5, 15).timestamp(),
            datetime.datetime(2022, 10, 28, 5, 25).timestamp(),
        ]
    ).astype(np.int32)
    manager._state_manager._next_version = 1
    return manager, mock_meta_eval_manager


def test_record_finished_evaluations_removes_from_state(native_context):
    manager, mock_meta_eval_manager = _manager_with_two_in_flight()

    async def body():
        await manager.record_evaluations_finished(5)
        assert mock_meta_eval_manager.save.call_args_list == [
            mock.call((_NumpyMatcher([15]), mock.ANY), version=1)
        ]
        mock_meta_eval_manager.reset_mock()
        await manager.record_evaluations_finished(15)
        assert mock_meta_eval_manager.save.call_args_list == [
            mock.call((_NumpyMatcher([]), _NumpyMatcher([])), version=2)
        ]
        with pytest.raises(
            RuntimeError, match='An internal error occurred where the EvaluationManager'
        ):
            await manager.record_evaluations_finished(7)
        await manager.wait_for_evaluations_to_finish()
        assert not manager._pending_tasks

    run(body())


def test_record_two_evaluations_finished_removes_from_state(native_context):
    manager, mock_meta_eval_manager = _manager_with_two_in_flight()

    async def body():
        task1 = asyncio.create_task(manager.record_evaluations_finished(5))
        task2 = asyncio.create_task(manager.record_evaluations_finished(15))
        finished, _ = await asyncio.wait([task1, task2])
        assert len(finished) == 2

    run(body())
    # Both removed, without version conflicts.
    assert mock_meta_eval_manager.save.call_args_list == [
        mock.call((_NumpyMatcher([15]), mock.ANY), version=1),
        mock.call((_NumpyMatcher([]), _NumpyMatcher([])), version=2),
    ]
    assert not manager._pending_tasks


def test_resume_previous_evaluations(native_context):
    mock_meta_eval_manager = _state_manager_mock()
    test_state_time = int(datetime.datetime(2022, 10, 28, 5, 15).timestamp())
    test_train_rounds = [5, 15]
    mock_meta_eval_manager.load_latest.side_effect = [
        (
            (
                np.asarray(test_train_rounds),
                np.asarray([test_state_time + r for r in test_train_rounds]),
            ),
            0,
        )
    ]
    mock_resumed_eval_managers = [_state_manager_mock(), _state_manager_mock()]
    processes = [_create_mock_eval_process(), _create_mock_eval_process()]
    for index, mock_resumed_eval_manager in enumerate(mock_resumed_eval_managers):
        mock_resumed_eval_manager.load_latest.side_effect = [
            (processes[0].initialize(), index * 10)
        ]
    mock_create_state_manager = mock.Mock(
        side_effect=[mock_meta_eval_manager] + mock_resumed_eval_managers
    )
    metrics_managers = [_release_manager_mock(), _release_manager_mock()]
    mock_create_process_fn = mock.Mock(side_effect=list(zip(processes, metrics_managers)))
    manager = _manager(
        mock_create_state_manager,
        mock_create_process_fn,
        duration=datetime.timedelta(milliseconds=10),
    )

    async def body():
        assert not manager._pending_tasks
        await manager.resume_from_previous_state()
        assert len(manager._pending_tasks) == len(test_train_rounds)
        await manager.wait_for_evaluations_to_finish()
        assert not manager._pending_tasks

    run(body())
    eval_names = [
        evaluation_program_logic._EVAL_NAME_PATTERN.format(round_num=r) for r in test_train_rounds
    ]
    assert mock_create_state_manager.call_args_list == (
        [mock.call(evaluation_program_logic._EVAL_MANAGER_KEY)]
        + [mock.call(name) for name in eval_names]
    )
    mock_meta_eval_manager.load_latest.assert_called_once()
    assert mock_create_process_fn.call_args_list == [mock.call(name) for name in eval_names]
    for index, mock_resumed_eval_manager in enumerate(mock_resumed_eval_managers):
        # Version 0 was saved before the restart: the first save is the next one.
        assert mock_resumed_eval_manager.save.call_args_list[0] == mock.call(
            mock.ANY, version=index * 10 + 1
        )
        mock_resumed_eval_manager.remove_all.assert_called_once()


def test_failed_evaluation_raises(native_context):
    manager = _manager(mock.Mock(), mock.Mock(), duration=datetime.timedelta(milliseconds=10))

    async def body():
        async def foo():
            raise RuntimeError('Task failed!')

        manager._pending_tasks.clear()
        manager._pending_tasks.add(asyncio.create_task(foo()))
        with pytest.raises(RuntimeError, match='Task failed!'):
            await manager.wait_for_evaluations_to_finish()

    run(body())


# ------------------------------------------------------------------ _run_evaluation

_END_TIME = datetime.datetime(2023, 4, 2, 5, 15)


def _return_time_fn():
    """`datetime.now` before `_END_TIME` on its first call, after it later (TFF's fake clock)."""
    called = [False]

    def _return_time():
        if not called[0]:
            called[0] = True
            return _END_TIME - datetime.timedelta(seconds=1)
        return _END_TIME + datetime.timedelta(seconds=1)

    return _return_time


def _run(eval_process, state_manager, train_round_num, per_round=None, aggregated=None, data=None):
    return run(
        evaluation_program_logic._run_evaluation(
            train_round_num=train_round_num,
            state_manager=state_manager,
            evaluation_process=eval_process,
            evaluation_name='test_evaluation',
            evaluation_data_source=data or _create_mock_datasource(),
            evaluation_per_round_clients_number=3,
            evaluation_end_time=_END_TIME,
            per_round_metrics_manager=per_round or _release_manager_mock(),
            aggregated_metrics_manager=aggregated or _release_manager_mock(),
        )
    )


def test_invalid_process_raises(native_context):
    @tff.federated_computation
    def empty_initialize():
        return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(
        computation_types.FederatedType((), tff.SERVER),
        computation_types.FederatedType(computation_types.SequenceType(np.int32), tff.CLIENTS),
    )
    def next_fn(state, inputs):
        del inputs
        return state

    eval_process = IterativeProcess(empty_initialize, next_fn)
    state_manager = _state_manager_mock(spec_set=False)
    state_manager.load_latest.return_value = ((), 0)
    datasets = [tf.data.Dataset.range(0).map(lambda x: tf.cast(x, tf.int32))] * 3
    data = mock.create_autospec(data_source.FederatedDataSource, instance=True, spec_set=True)
    data.iterator.return_value.select.return_value = datasets
    with pytest.raises(
        TypeError, match='Expected a `tff.learning.templates.LearningProcessOutput`'
    ):
        _run(eval_process, state_manager, 1, data=data)


def test_no_zero_state_raises(native_context):
    state_manager = _state_manager_mock(spec_set=False)
    state_manager.load_latest.return_value = (None, 0)
    with pytest.raises(ValueError, match='No previous state found for evaluation'):
        _run(_create_mock_eval_process(), state_manager, 1)


def test_passed_end_time_runs_one_round(native_context):
    eval_process = _create_mock_eval_process()
    state_manager = _state_manager_mock(spec_set=False)
    state_manager.load_latest.return_value = (eval_process.initialize(), 0)
    per_round, aggregated = _release_manager_mock(), _release_manager_mock()
    _run(eval_process, state_manager, 1, per_round, aggregated)
    assert state_manager.load_latest.call_args_list == [mock.call(mock.ANY)]
    assert state_manager.save.call_args_list == [mock.call(mock.ANY, version=1)]
    assert per_round.release.call_args_list == [_create_per_round_eval_metrics_release_call(key=1)]
    assert aggregated.release.call_args_list == [mock.call(mock.ANY, key=1)]


@pytest.mark.parametrize('latest_version', [0, 5])
def test_future_end_time_runs_at_least_one_more_round(native_context, latest_version):
    # latest_version 5: TFF's resumed case (rounds numbered from the resumed version).
    eval_process = _create_mock_eval_process()
    state_manager = _state_manager_mock(spec_set=False)
    state_manager.load_latest.return_value = (eval_process.initialize(), latest_version)
    per_round, aggregated = _release_manager_mock(), _release_manager_mock()
    train_round_num = 10
    with mock.patch.object(datetime, 'datetime') as m_datetime:
        m_datetime.now.side_effect = _return_time_fn()
        _run(eval_process, state_manager, train_round_num, per_round, aggregated)
    assert state_manager.load_latest.call_args_list == [mock.call(mock.ANY)]
    # One round before the clock is read, one more while it is before the end.
    assert state_manager.save.call_args_list == [
        mock.call(mock.ANY, version=latest_version + 1),
        mock.call(mock.ANY, version=latest_version + 2),
    ]
    assert per_round.release.call_args_list == [
        _create_per_round_eval_metrics_release_call(key=train_round_num + latest_version),
        _create_per_round_eval_metrics_release_call(key=train_round_num + latest_version + 1),
    ]
    assert aggregated.release.call_args_list == [mock.call(mock.ANY, key=train_round_num)]


def test_resume_evaluation_uses_correct_end_time(native_context):
    eval_process = _create_mock_eval_process()
    state_manager = _state_manager_mock(spec_set=False)
    latest_version = 5
    state_manager.load_latest.return_value = (eval_process.initialize(), latest_version)
    per_round, aggregated = _release_manager_mock(), _release_manager_mock()
    train_round_num = 10
    _run(eval_process, state_manager, train_round_num, per_round, aggregated)
    # The end time has passed: exactly one round.
    state_manager.save.assert_has_calls([mock.call(mock.ANY, version=latest_version + 1)])
    per_round.release.assert_has_calls(
        [_create_per_round_eval_metrics_release_call(key=train_round_num + latest_version)]
    )
    assert aggregated.release.call_args_list == [mock.call(mock.ANY, key=train_round_num)]


def test_run_evaluation_raises_outside_a_federated_context():
    with pytest.raises(ValueError, match='FederatedContext'):
        _run(_create_mock_eval_process(), _state_manager_mock(spec_set=False), 1)


def test_resume_with_file_state_managers_after_a_stop(native_context, tmp_path):
    """Ours: an evaluation stopped mid-way resumes from its files in a new manager."""
    eval_process = _create_mock_eval_process()
    eval_process.set_model_weights.return_value = eval_process.initialize.return_value
    per_round = _release_manager_mock()

    def make_manager(duration):
        return evaluation_program_logic.EvaluationManager(
            data_source=_create_mock_datasource(),
            aggregated_metrics_manager=_release_manager_mock(),
            create_state_manager_fn=lambda name: file_program_state_manager.FileProgramStateManager(
                tmp_path / name
            ),
            create_process_fn=lambda name: (eval_process, per_round),
            cohort_size=2,
            duration=duration,
        )

    async def stop_after_two_rounds():
        manager = make_manager(datetime.timedelta(hours=1))
        await manager.resume_from_previous_state()
        await manager.start_evaluation(
            3, int(datetime.datetime.now().timestamp()), model_weights.ModelWeights([], [])
        )
        for _ in range(1000):
            if per_round.release.call_count >= 2:
                break
            await asyncio.sleep(0.01)
            for task in manager._pending_tasks:
                if task.done():
                    task.result()  # an evaluation that failed: its error
        assert per_round.release.call_count >= 2
        for task in list(manager._pending_tasks):  # the program stops
            task.cancel()
        await asyncio.gather(*manager._pending_tasks, return_exceptions=True)

    run(stop_after_two_rounds())
    eval_dir = tmp_path / evaluation_program_logic._EVAL_NAME_PATTERN.format(round_num=3)
    assert any(eval_dir.iterdir())
    released_before = per_round.release.call_count

    async def resume():
        # Resumed with the saved start time: the hour has not passed, so cut it short.
        manager = make_manager(datetime.timedelta(0))
        await manager.resume_from_previous_state()
        assert len(manager._pending_tasks) == 1
        await manager.wait_for_evaluations_to_finish()
        return manager

    manager = run(resume())
    # One more round, numbered after the saved ones; then the evaluation's files are removed.
    keys = [c.kwargs['key'] for c in per_round.release.call_args_list]
    assert keys[released_before] == keys[released_before - 1] + 1
    assert not any(eval_dir.iterdir())
    assert manager._evaluating_training_checkpoints.tolist() == []
