"""Federated evaluation program logic (``tff.learning.programs``): `EvaluationManager`.

`EvaluationManager` "forks off" evaluation loops from a training program:
`start_evaluation(train_round, start_timestamp_seconds, model_weights)`
saves the initial evaluation state (with the training round's weights) as
version 0 of a state manager of its own and starts an `asyncio.Task` that
runs evaluation rounds (`tff.learning.algorithms.build_fed_eval` processes)
until `duration` has passed since the start, at least one round. Each
round's ``current_round_metrics`` are released under key ``train round +
eval round - 1``; at the end the ``total_rounds_metrics`` are released under
the training round. The manager keeps the training rounds under evaluation
and their start times (two int32 arrays) in a state manager of its own, so
`resume_from_previous_state` restarts the unfinished ones after a restart.

`extract_and_rewrap_metrics(metrics, path=...)` moves the sub-structure at
`path` to the top-level key ``model_metrics`` (TensorBoard's tab).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import typing
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Optional

import numpy as np

from simharness.learning.templates import learning_process
from simharness.program import data_source as data_source_lib
from simharness.program import file_program_state_manager, federated_context
from simharness.program import release_manager, value_reference

__all__ = ['EvaluationManager', 'MODEL_METRICS_PREFIX', 'extract_and_rewrap_metrics']

_LOG = logging.getLogger(__name__)

#: The key the extracted model metrics are released under (TensorBoard's tab).
MODEL_METRICS_PREFIX = 'model_metrics'
# Where `build_fed_eval`'s current-round and total-rounds metrics are.
_EVAL_METRICS_PATH_COMPONENTS = ('client_work', 'eval')
_EVAL_MANAGER_KEY = 'eval_manager'
_EVAL_NAME_PATTERN = 'evaluation_of_train_round_{round_num:05d}'

_StateManagerFn = Callable[[str], file_program_state_manager.FileProgramStateManager]
_ProcessFn = Callable[
    [str], tuple[learning_process.LearningProcess, Optional[release_manager.ReleaseManager]]
]


def _append_integer(integer_array: np.ndarray, new_value: int) -> np.ndarray:
    return np.concatenate([integer_array, np.asarray([new_value], dtype=np.int32)])


def _pop_value(
    round_array: np.ndarray, time_array: np.ndarray, value: int
) -> tuple[np.ndarray, np.ndarray]:
    if np.size(round_array) == 0:
        raise ValueError(f'round_array was empty, but tried to pop value: {value}')
    rounds_to_keep = round_array != value
    return round_array[rounds_to_keep], time_array[rounds_to_keep]


class AutoVersionAdvanceingStateManager:
    """A program state manager whose `save` takes the next version itself (TFF's name).

    Args:
        state_manager: the `FileProgramStateManager` that saves and loads.
    """

    def __init__(self, state_manager: file_program_state_manager.FileProgramStateManager):
        self._state_manager = state_manager
        self._next_version = 0
        self._lock = asyncio.Lock()

    async def load_latest(self, structure: Any) -> Any:
        """The latest saved state (None if none); later saves take the versions after it."""
        async with self._lock:
            state, version = await self._state_manager.load_latest(structure)
            self._next_version = version + 1
            return state

    async def save(self, program_state: Any) -> None:
        """Saves `program_state` as the next version."""
        async with self._lock:
            await self._state_manager.save(program_state, version=self._next_version)
            self._next_version += 1


class EvaluationManager:
    """Starts, tracks and resumes evaluation loops of training checkpoints.

    Uses N + 1 program state managers, made by `create_state_manager_fn`: one
    (key ``'eval_manager'``) for the list of evaluations in progress, and one
    per evaluation loop (named ``evaluation_of_train_round_NNNNN``) for its
    process state.

    Args:
        data_source: the `FederatedDataSource` each evaluation loop draws from
            (an iterator per loop).
        aggregated_metrics_manager: releases the total-rounds metrics at the end
            of each loop (None: not released).
        create_state_manager_fn: ``name -> FileProgramStateManager``.
        create_process_fn: ``name -> (evaluation process, per-round metrics
            release manager or None)``.
        cohort_size: clients per evaluation round.
        duration: how long each evaluation loop runs (at least one round).
    """

    def __init__(
        self,
        data_source: data_source_lib.FederatedDataSource,
        aggregated_metrics_manager: Optional[release_manager.ReleaseManager],
        create_state_manager_fn: _StateManagerFn,
        create_process_fn: _ProcessFn,
        cohort_size: int,
        duration: datetime.timedelta = datetime.timedelta(hours=24),
    ):
        self._data_source = data_source
        self._aggregated_metrics_manager = aggregated_metrics_manager
        self._create_state_manager_fn = create_state_manager_fn
        self._create_evaluation_process_fn = create_process_fn
        self._cohort_size = cohort_size
        self._duration = duration
        self._state_manager = AutoVersionAdvanceingStateManager(
            create_state_manager_fn(_EVAL_MANAGER_KEY)
        )
        self._evaluating_training_checkpoints = np.zeros([0], np.int32)
        self._evaluation_start_timestamp_seconds = np.zeros([0], np.int32)
        self._pending_tasks: set[asyncio.Task] = set()

    @property
    def data_source(self) -> data_source_lib.FederatedDataSource:
        """The data source each evaluation loop makes an iterator of."""
        return self._data_source

    @property
    def aggregated_metrics_manager(self) -> Optional[release_manager.ReleaseManager]:
        """Releases the metrics at the end of each evaluation loop."""
        return self._aggregated_metrics_manager

    @property
    def create_state_manager_fn(self) -> _StateManagerFn:
        """Makes a program state manager per evaluation loop."""
        return self._create_state_manager_fn

    @property
    def create_process_fn(self) -> _ProcessFn:
        """Makes a process and a per-round metrics manager per evaluation loop."""
        return self._create_evaluation_process_fn

    @property
    def cohort_size(self) -> int:
        """Clients per evaluation round."""
        return self._cohort_size

    @property
    def duration(self) -> datetime.timedelta:
        """How long each evaluation loop runs."""
        return self._duration

    async def wait_for_evaluations_to_finish(self) -> None:
        """Waits for every evaluation loop started; raises the first error of one.

        Raises:
            RuntimeError: a task is still unfinished after the wait.
        """
        if not self._pending_tasks:
            return
        done_tasks, self._pending_tasks = await asyncio.wait(
            self._pending_tasks, timeout=None, return_when=asyncio.ALL_COMPLETED
        )
        if self._pending_tasks:
            raise RuntimeError(
                'Error in Python runtime while waiting for all tasks to complete: '
                'expected all tasks to be complete, but wait() returned with '
                'still unfinished tasks.'
            )
        for task in done_tasks:
            task.result()  # raises a loop's stored exception

    def _finalize_task(self, task: asyncio.Task) -> None:
        _LOG.info('Finalizing task: %s', task)
        self._pending_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Kept for `wait_for_evaluations_to_finish` to raise.
            self._pending_tasks.add(task)

    async def resume_from_previous_state(self) -> None:
        """Loads the latest manager state and restarts the evaluations in progress then."""
        loaded_state = await self._state_manager.load_latest(
            (self._evaluating_training_checkpoints, self._evaluation_start_timestamp_seconds)
        )
        if loaded_state is None:
            _LOG.info('No previous evaluations found, nothing to resume.')
            return
        (self._evaluating_training_checkpoints, self._evaluation_start_timestamp_seconds) = (
            np.asarray(a, np.int32).reshape([-1]) for a in loaded_state
        )
        train_round_nums = self._evaluating_training_checkpoints.tolist()
        _LOG.info('Resuming previous evaluations found for training rounds: %s', train_round_nums)
        evaluation_end_times = [
            datetime.datetime.fromtimestamp(int(start)) + self._duration
            for start in self._evaluation_start_timestamp_seconds
        ]
        for train_round_num, evaluation_end_time in zip(train_round_nums, evaluation_end_times):
            evaluation_name = _EVAL_NAME_PATTERN.format(round_num=train_round_num)
            # `start_evaluation` saved version 0 (the training weights); resume from there.
            state_manager = self._create_state_manager_fn(evaluation_name)
            evaluation_process, metrics_manager = self._create_evaluation_process_fn(
                evaluation_name
            )
            self._start_evaluation_from_saved_model_weights(
                train_round_num,
                evaluation_process,
                metrics_manager,
                state_manager,
                evaluation_end_time,
            )

    def _start_evaluation_from_saved_model_weights(
        self,
        train_round_num: int,
        eval_process: learning_process.LearningProcess,
        per_round_metrics_manager: Optional[release_manager.ReleaseManager],
        state_manager: file_program_state_manager.FileProgramStateManager,
        evaluation_end_time: datetime.datetime,
    ) -> None:
        """Starts the loop of `train_round_num` as a task (its version 0 must be saved)."""

        async def run_and_record_completion():
            await _run_evaluation(
                train_round_num,
                state_manager,
                evaluation_process=eval_process,
                evaluation_name=_EVAL_NAME_PATTERN.format(round_num=train_round_num),
                evaluation_data_source=self._data_source,
                evaluation_per_round_clients_number=self._cohort_size,
                evaluation_end_time=evaluation_end_time,
                per_round_metrics_manager=per_round_metrics_manager,
                aggregated_metrics_manager=self._aggregated_metrics_manager,
            )
            await self.record_evaluations_finished(train_round_num)
            # Only after the manager's state no longer lists this evaluation.
            await state_manager.remove_all()

        new_task = asyncio.create_task(run_and_record_completion())
        self._pending_tasks.add(new_task)
        new_task.add_done_callback(self._finalize_task)

    async def start_evaluation(
        self, train_round: int, start_timestamp_seconds: int, model_weights: Any
    ) -> None:
        """Starts an evaluation loop of `model_weights` (a `ModelWeights`) of `train_round`."""
        self._evaluating_training_checkpoints = _append_integer(
            self._evaluating_training_checkpoints, train_round
        )
        self._evaluation_start_timestamp_seconds = _append_integer(
            self._evaluation_start_timestamp_seconds, start_timestamp_seconds
        )
        # The initial state with the training weights is saved as version 0
        # first, so the evaluation resumes even if the program stops before its
        # first round.
        evaluation_name = _EVAL_NAME_PATTERN.format(round_num=train_round)
        state_manager = self._create_state_manager_fn(evaluation_name)
        evaluation_process, metrics_manager = self._create_evaluation_process_fn(evaluation_name)
        eval_state = await value_reference.materialize_value(evaluation_process.initialize())
        eval_state = await value_reference.materialize_value(
            evaluation_process.set_model_weights(eval_state, model_weights)
        )
        await state_manager.save(eval_state, version=0)
        evaluation_end_time = (
            datetime.datetime.fromtimestamp(start_timestamp_seconds) + self._duration
        )
        self._start_evaluation_from_saved_model_weights(
            train_round, evaluation_process, metrics_manager, state_manager, evaluation_end_time
        )
        await self._state_manager.save(
            (self._evaluating_training_checkpoints, self._evaluation_start_timestamp_seconds)
        )

    async def record_evaluations_finished(self, train_round: int) -> None:
        """Drops `train_round` from the evaluations in progress (and saves the manager's state).

        Raises:
            RuntimeError: `train_round` is not being evaluated.
        """
        try:
            (self._evaluating_training_checkpoints, self._evaluation_start_timestamp_seconds) = (
                _pop_value(
                    self._evaluating_training_checkpoints,
                    self._evaluation_start_timestamp_seconds,
                    train_round,
                )
            )
        except ValueError as e:
            raise RuntimeError(
                'An internal error occurred where the EvaluationManager is trying to record an '
                f'evaluation for train round [{train_round}] finished but also has no state '
                'about in-progress evaluation rounds.'
            ) from e
        await self._state_manager.save(
            (self._evaluating_training_checkpoints, self._evaluation_start_timestamp_seconds)
        )


def extract_and_rewrap_metrics(
    metrics_structure: Mapping[str, Any], *, path: Sequence[str]
) -> Mapping[str, Any]:
    """A copy of `metrics_structure` with the sub-structure at `path` moved to ``model_metrics``.

    ``client_work/eval/current_round_metrics/...`` (evaluation) or
    ``client_work/train/...`` (training) become ``model_metrics/...``; the
    other metrics stay where they are. The mappings along `path` are copied;
    `metrics_structure` is left as it was.

    Raises:
        ValueError: `path` is empty.
        KeyError: a key of `path` is missing (or not a mapping's).
    """
    if not path:
        raise ValueError('`path` is empty, must be a sequence of at least one element')
    current_structure = typing.cast(MutableMapping[str, Any], metrics_structure.copy())
    structure_copy = current_structure
    *path_parts, last_part = path
    for path_part in path_parts:
        part = current_structure.get(path_part)
        if part is None:
            raise KeyError(
                f'[{path_part}] of path {path} did not exist in structure: {structure_copy}'
            )
        if not isinstance(part, Mapping):
            raise KeyError(
                f'[{path_part}] of path {path} is a {type(part).__name__}, not a '
                f'mapping, in structure: {structure_copy}'
            )
        part = part.copy()
        current_structure[path_part] = part
        current_structure = part
    if (substructure := current_structure.get(last_part)) is None:
        raise KeyError(f'[{last_part}] of path {path} did not exist in structure: {structure_copy}')
    del current_structure[last_part]
    structure_copy[MODEL_METRICS_PREFIX] = substructure
    return structure_copy


async def _run_evaluation(
    train_round_num: int,
    state_manager: file_program_state_manager.FileProgramStateManager,
    evaluation_process: learning_process.LearningProcess,
    evaluation_name: str,
    evaluation_data_source: data_source_lib.FederatedDataSource,
    evaluation_per_round_clients_number: int,
    evaluation_end_time: datetime.datetime,
    per_round_metrics_manager: Optional[release_manager.ReleaseManager],
    aggregated_metrics_manager: Optional[release_manager.ReleaseManager],
) -> None:
    """Runs evaluation rounds of one training checkpoint until `evaluation_end_time` (one at least).

    The state is loaded from `state_manager` (version 0: the initial state;
    later: a resumed loop) and saved after every round.

    Raises:
        TypeError: `evaluation_process.next` does not return a
            `LearningProcessOutput`.
        ValueError: no state is saved in `state_manager`.
    """
    federated_context.check_in_federated_context()
    evaluation_data_iterator = evaluation_data_source.iterator()

    async def invoke_evaluation(evaluation_state, eval_round_num):
        round_start = time.monotonic()
        _LOG.info(
            'Starting evaluation of `%s`, round %d',
            evaluation_name,
            eval_round_num - train_round_num,
        )
        evaluation_data = evaluation_data_iterator.select(evaluation_per_round_clients_number)
        evaluation_result = await value_reference.materialize_value(
            evaluation_process.next(evaluation_state, evaluation_data)
        )
        if not isinstance(evaluation_result, learning_process.LearningProcessOutput):
            raise TypeError(
                'FederatedContext returned unexpected result type after evaluation computation '
                'invocation. Expected a `tff.learning.templates.LearningProcessOutput`, got '
                f'{type(evaluation_result)}'
            )
        evaluation_state = evaluation_result.state
        evaluation_metrics = evaluation_result.metrics
        # Only the current round's metrics here; the total is released at the end.
        if per_round_metrics_manager is not None:
            current_round_eval_metrics = extract_and_rewrap_metrics(
                evaluation_metrics, path=_EVAL_METRICS_PATH_COMPONENTS + ('current_round_metrics',)
            )
            await per_round_metrics_manager.release(current_round_eval_metrics, key=eval_round_num)
        _LOG.info(
            'Finished evaluation of `%s`, round %d, duration %.2f seconds',
            evaluation_name,
            eval_round_num - train_round_num,
            time.monotonic() - round_start,
        )
        return evaluation_state, evaluation_metrics, eval_round_num + 1

    evaluation_state, version = await state_manager.load_latest(
        await value_reference.materialize_value(evaluation_process.initialize())
    )
    if evaluation_state is None:
        raise ValueError(
            'No previous state found for evaluation. Evaluations must previously '
            'have at least version 0 saved.'
        )
    # Evaluation rounds count from the training round (they line up in
    # TensorBoard's step view), plus the rounds a resumed loop already ran.
    eval_round_num = train_round_num + version
    evaluation_state, evaluation_metrics, eval_round_num = await invoke_evaluation(
        evaluation_state, eval_round_num
    )
    version += 1
    await state_manager.save(evaluation_state, version=version)
    while datetime.datetime.now() < evaluation_end_time:
        evaluation_state, evaluation_metrics, eval_round_num = await invoke_evaluation(
            evaluation_state, eval_round_num
        )
        version += 1
        await state_manager.save(evaluation_state, version=version)
    _LOG.info('Finished evaluation of %s at end time %s', evaluation_name, evaluation_end_time)
    if aggregated_metrics_manager is not None:
        total_rounds_eval_metrics = extract_and_rewrap_metrics(
            evaluation_metrics, path=_EVAL_METRICS_PATH_COMPONENTS + ('total_rounds_metrics',)
        )
        await aggregated_metrics_manager.release(total_rounds_eval_metrics, key=train_round_num)
