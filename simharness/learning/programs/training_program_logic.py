"""Federated training program logic (``tff.learning.programs``): `train_model`, `ProgramState`.

`train_model` runs a `LearningProcess` for `train_total_rounds` rounds in
the current `FederatedContext` (a `NativeFederatedContext`): it saves a
`ProgramState` (process state, round, next evaluation time, data iterator)
every round and resumes from the latest one, releases training metrics
every round and the process state every 10 rounds and at the last, and
hands model weights to an `EvaluationManager` every
`evaluation_periodicity` rounds (or time) and at the last round.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Mapping, NamedTuple, Optional, Union, cast

from simharness.learning.programs import evaluation_program_logic
from simharness.learning.templates import composers, learning_process
from simharness.program import data_source, federated_context
from simharness.program import program_state_manager as program_state_manager_lib
from simharness.program import release_manager, value_reference

__all__ = ['ProgramState', 'TaskManager', 'train_model']

_LOG = logging.getLogger(__name__)


class ProgramState(NamedTuple):
    """The state `train_model` saves every round.

    Attributes:
        state: the training process's state.
        round_number: the last finished round (0: none yet).
        next_evaluation_timestamp_seconds: when the next evaluation is due
            (time-based periodicity), or None.
        data_iterator: the training data's `FederatedDataSourceIterator`.
    """

    state: composers.LearningAlgorithmState
    round_number: int
    next_evaluation_timestamp_seconds: Optional[int]
    data_iterator: Optional[data_source.FederatedDataSourceIterator]


class TaskManager:
    """Holds in-flight `asyncio.Task` s (so they are not collected) until they finish.

    A finished task is dropped; one that failed is kept, and
    `wait_for_all_tasks` raises its error.
    """

    def __init__(self):
        self._pending_tasks: set[asyncio.Task] = set()

    async def wait_for_all_tasks(self) -> None:
        """Waits for every task added; raises the first error of one."""
        if not self._pending_tasks:
            return
        done, _ = await asyncio.wait(
            self._pending_tasks, timeout=None, return_when=asyncio.ALL_COMPLETED
        )
        for task in done:
            task.result()

    def _finalize_task(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is None:
            self._pending_tasks.discard(task)

    def add_task(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Runs `coro` as a task."""
        new_task = asyncio.create_task(coro)
        new_task.add_done_callback(self._finalize_task)
        self._pending_tasks.add(new_task)


async def train_model(
    *,
    train_process: learning_process.LearningProcess,
    initial_train_state: Optional[composers.LearningAlgorithmState] = None,
    train_data_source: data_source.FederatedDataSource,
    train_per_round_clients: int,
    train_total_rounds: int,
    should_discard_round: Optional[Callable[[learning_process.LearningProcessOutput], bool]] = None,
    program_state_manager: program_state_manager_lib.ProgramStateManager,
    model_output_manager: release_manager.ReleaseManager,
    train_metrics_manager: Optional[release_manager.ReleaseManager] = None,
    evaluation_manager: Optional[evaluation_program_logic.EvaluationManager],
    evaluation_periodicity: Union[int, datetime.timedelta],
) -> None:
    """Runs `train_total_rounds` rounds of `train_process`, optionally evaluating on the side.

    The initial state (`initial_train_state`, else ``train_process.initialize()``)
    is saved as version 0 of `program_state_manager` (kept by a
    `FileProgramStateManager` with ``keep_first=True``: later experiments can
    start from it). If a program state is saved already, training resumes
    from the latest one, its data iterator included.

    Args:
        train_process: the `LearningProcess` (its state a `LearningAlgorithmState`).
        initial_train_state: the initial state (of the type of
            ``train_process.initialize``'s result); None: ``initialize()``.
        train_data_source: the `FederatedDataSource` of the training clients.
        train_per_round_clients: clients per round.
        train_total_rounds: rounds in all.
        should_discard_round: ``LearningProcessOutput -> bool``; a discarded
            round is run again from the previous state and data iterator.
        program_state_manager: saves a `ProgramState` every round.
        model_output_manager: releases the process state (key
            ``'training_checkpoint_round_N'``) every 10 rounds and at the last.
        train_metrics_manager: releases the ``client_work/train`` metrics
            (moved to ``model_metrics``) every round, key the round number.
        evaluation_manager: an `EvaluationManager` (None: no evaluation).
        evaluation_periodicity: rounds (an int) or time (a
            `datetime.timedelta`) between evaluations; the last round is
            always evaluated.

    Raises:
        ValueError: the current context is not a `FederatedContext`, the
            initial state is None, or `evaluation_periodicity` is neither an
            int nor a timedelta.
        TypeError: ``train_process.next`` did not return a `LearningProcessOutput`.
        KeyError: the round's metrics have no ``client_work/train``.
    """
    federated_context.check_in_federated_context()
    # Pending tasks (state saves, releases) awaited before returning.
    task_manager = TaskManager()

    if evaluation_manager is not None:
        _LOG.info('Looking for previous evaluation states...')
        await evaluation_manager.resume_from_previous_state()

    train_data_iterator = train_data_source.iterator()

    if initial_train_state is None:
        initial_train_state = await value_reference.materialize_value(train_process.initialize())
    train_state = initial_train_state
    if train_state is None:
        raise ValueError('The initial train state is None.')
    program_state, version = await program_state_manager.load_latest(
        ProgramState(train_state, 0, 0, train_data_iterator)
    )
    if program_state is not None:
        train_state = program_state.state
        start_round = int(program_state.round_number)
        next_evaluation_timestamp_seconds = program_state.next_evaluation_timestamp_seconds
        train_data_iterator = program_state.data_iterator
        _LOG.info('Found previous program state version %d', version)
        if start_round < train_total_rounds:
            _LOG.info(
                'Resuming from training round %d, running until round %d',
                start_round,
                train_total_rounds,
            )
        else:
            _LOG.info(
                'Loaded previously completed round %d, but only requested training until '
                'round %d, will not run training.',
                start_round,
                train_total_rounds,
            )
            if evaluation_manager is not None:
                _LOG.info('Checking for remaining evaluations need to finish.')
                await evaluation_manager.wait_for_evaluations_to_finish()
            return
    else:
        start_round = 0
        _LOG.info('Starting program without previous state, saving initial state.')
        next_evaluation_timestamp_seconds = None
        await program_state_manager.save(
            ProgramState(
                train_state,
                start_round,
                next_evaluation_timestamp_seconds,
                copy.deepcopy(train_data_iterator),
            ),
            version=start_round,
        )

    # The time after which the next evaluation starts (time-based periodicity).
    next_evaluation_time = (
        datetime.datetime.fromtimestamp(int(next_evaluation_timestamp_seconds))
        if next_evaluation_timestamp_seconds
        else None
    )

    def should_evaluate_round(round_num: int, train_round_finished_time: datetime.datetime) -> bool:
        if round_num == train_total_rounds:
            return True
        if isinstance(evaluation_periodicity, int):
            return round_num % evaluation_periodicity == 0
        if isinstance(evaluation_periodicity, datetime.timedelta):
            nonlocal next_evaluation_time
            if next_evaluation_time is None or next_evaluation_time < train_round_finished_time:
                next_evaluation_time = train_round_finished_time + evaluation_periodicity
                return True
            return False
        raise ValueError(
            '`evaluation_periodicity` must be an `int` or a `datetime.timedelta` '
            f'type. Got {type(evaluation_periodicity)}'
        )

    round_num = start_round + 1
    # Reset on restart: discarded rounds of the current round are forgotten.
    num_discarded_rounds = 0
    while round_num <= train_total_rounds:
        _LOG.info('Running train round %d', round_num)
        # Every retry of a round starts from the same data position.
        previous_train_data_iterator = copy.deepcopy(train_data_iterator)
        round_participants_data = train_data_iterator.select(train_per_round_clients)
        train_result = await value_reference.materialize_value(
            train_process.next(train_state, round_participants_data)
        )
        if should_discard_round is not None and should_discard_round(train_result):
            num_discarded_rounds += 1
            _LOG.info(
                'The training round %d should be discarded. The program will retry this round.',
                round_num,
            )
            train_data_iterator = copy.deepcopy(previous_train_data_iterator)
            continue
        _LOG.info(
            'Finished train round %d with %d discarded rounds', round_num, num_discarded_rounds
        )
        if not isinstance(train_result, learning_process.LearningProcessOutput):
            raise TypeError(
                'FederatedContext returned unexpected result type after training computation '
                'invocation. Expected a `tff.learning.templates.LearningProcessOutput`, got '
                f'{type(train_result)}'
            )
        # A result's fields hold values: the process' state (a `LearningAlgorithmState`
        # for the composed processes this program trains) and its metrics (a mapping).
        train_state = cast(composers.LearningAlgorithmState, train_result.state)
        train_metrics = cast(Mapping[str, object], train_result.metrics)

        train_round_finished_time = datetime.datetime.now()
        if evaluation_manager is not None and should_evaluate_round(
            round_num, train_round_finished_time
        ):
            model_weights = train_process.get_model_weights(train_state)
            await evaluation_manager.start_evaluation(
                round_num, int(train_round_finished_time.timestamp()), model_weights
            )
            _LOG.info('Added evaluation for training round %d', round_num)

        next_evaluation_timestamp_seconds = (
            int(next_evaluation_time.timestamp()) if next_evaluation_time else None
        )
        task_manager.add_task(
            program_state_manager.save(
                ProgramState(
                    train_state,
                    round_num,
                    next_evaluation_timestamp_seconds,
                    copy.deepcopy(train_data_iterator),
                ),
                version=round_num,
            )
        )
        if train_metrics_manager is not None:
            try:
                released_train_metrics = evaluation_program_logic.extract_and_rewrap_metrics(
                    train_metrics, path=('client_work', 'train')
                )
            except KeyError as e:
                raise KeyError(
                    '`train_model` requires the `train_process` argument to be a '
                    '`tff.learning.templates.LearningProcess` whose `next` computation metrics '
                    'result has a `train` field. Instead got a `tff.Computation` whose result '
                    f'signature was: {train_process.next.type_signature.result}'
                ) from e
            task_manager.add_task(
                train_metrics_manager.release(released_train_metrics, key=round_num)
            )
        # TFF's fixed period: the state every 10 rounds and at the last round.
        if round_num % 10 == 0 or round_num == train_total_rounds:
            _LOG.info('Releasing training checkpoint for round %d', round_num)
            task_manager.add_task(
                model_output_manager.release(
                    train_state, key=f'training_checkpoint_round_{round_num}'
                )
            )
        round_num += 1
        num_discarded_rounds = 0

    await task_manager.wait_for_all_tasks()
    if evaluation_manager is not None:
        await evaluation_manager.wait_for_evaluations_to_finish()
