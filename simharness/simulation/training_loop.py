"""Training loops for iterative process simulations: TFF's `run_training_process`.

Program state and metrics go through TFF's program interfaces (duck-typed):
a program state manager with ``async load_latest(structure)`` and ``async
save(state, version)``, and release managers with ``async release(value,
key)`` (see simharness.program). Their coroutines run on a private event
loop (in a helper thread when the caller's thread already runs one, as in
Jupyter), never on a loop the user owns.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import time
from typing import (
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    MutableMapping,
    Optional,
    TypeVar,
)

from simharness.core.structure import Struct

__all__ = [
    'EVALUATION_METRICS_PREFIX',
    'EVALUATION_TIME_KEY',
    'ROUND_NUMBER_KEY',
    'ROUND_TIME_KEY',
    'TRAINING_TIME_KEY',
    'run_training_process',
]

_LOG = logging.getLogger(__name__)

MetricsType = MutableMapping[str, Any]
_R = TypeVar('_R')

ROUND_TIME_KEY = 'round_time_in_seconds'
ROUND_NUMBER_KEY = 'round_number'
TRAINING_TIME_KEY = 'training_time_in_seconds'
EVALUATION_METRICS_PREFIX = 'evaluation/'
EVALUATION_TIME_KEY = 'evaluation_time_in_seconds'


def _run(awaitable_fn: Callable[[], Awaitable[Any]]) -> Any:
    """Runs a coroutine to completion on a private loop (another thread if one runs here).

    Not ``asyncio.run``: it unsets the thread's event loop when done, and a program that
    calls ``asyncio.get_event_loop()`` after the training loop (as TFF's, which runs on that
    loop, allows: e.g. to read its program state manager) would get a RuntimeError."""

    async def main() -> Any:
        return await awaitable_fn()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _on_private_loop(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(_on_private_loop, main()).result()


def _on_private_loop(coro: Coroutine[object, object, _R]) -> _R:
    """`coro` run on a new event loop, closed after it (its leftover tasks cancelled), the
    thread's current loop left as it was."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _gather(coros: list) -> Any:
    async def all_of() -> Any:
        return await asyncio.gather(*coros)

    return all_of


def _state_and_metrics(output: Any) -> tuple[Any, Any]:
    """``(state, metrics)`` of a `next` result: an output with those attributes, or a pair."""
    if hasattr(output, 'state') and hasattr(output, 'metrics'):
        return output.state, output.metrics
    if isinstance(output, Mapping):
        output = list(output.values())
    elif isinstance(output, Struct):
        output = list(output)
    state, metrics = output
    return state, metrics


def _run_training(
    training_fn: Callable[..., Any],
    client_selection_fn: Callable[[int], Any],
    state: Any,
    round_num: int,
) -> tuple[Any, collections.OrderedDict]:
    _LOG.info('Running training at round %d', round_num)
    start = time.time()
    training_data = client_selection_fn(round_num)
    state, metrics = _state_and_metrics(training_fn(state, training_data))
    metrics = collections.OrderedDict(metrics.items() if hasattr(metrics, 'items') else metrics)
    metrics[TRAINING_TIME_KEY] = time.time() - start
    metrics[ROUND_NUMBER_KEY] = round_num
    return state, metrics


def _run_evaluation(
    evaluation_fn: Callable[[Any, Any], MetricsType],
    client_selection_fn: Callable[[int], Any],
    state: Any,
    round_num: int,
) -> collections.OrderedDict:
    _LOG.info('Running evaluation at round %d', round_num)
    start = time.time()
    evaluation_data = client_selection_fn(round_num)
    metrics = evaluation_fn(state, evaluation_data)
    metrics[EVALUATION_TIME_KEY] = time.time() - start
    return collections.OrderedDict((EVALUATION_METRICS_PREFIX + k, v) for k, v in metrics.items())


def run_training_process(
    training_process: Any,
    training_selection_fn: Callable[[int], Any],
    total_rounds: int,
    evaluation_fn: Optional[Callable[[Any, Any], MetricsType]] = None,
    evaluation_selection_fn: Optional[Callable[[int], Any]] = None,
    rounds_per_evaluation: int = 1,
    program_state_manager: Optional[Any] = None,
    rounds_per_saving_program_state: int = 1,
    metrics_managers: Optional[Iterable[Any]] = None,
) -> Any:
    """Runs `training_process` for `total_rounds` rounds, as TFF's.

    Round 0 is the initial state: it is evaluated (when `evaluation_fn` and
    `evaluation_selection_fn` are given), its metrics released with key 0,
    and it is saved as version 0. Rounds 1..total_rounds call
    ``training_process.next(state, training_selection_fn(round))``; every
    `rounds_per_evaluation` rounds the state is evaluated, the round's metrics
    (training metrics plus ``training_time_in_seconds``, ``round_number``,
    and the evaluation metrics prefixed ``evaluation/``) are released to every
    metrics manager with the round as key, and every
    `rounds_per_saving_program_state` rounds the state is saved. With a
    saved state, training resumes after its version.

    Args:
        training_process: an `IterativeProcess` whose ``next`` returns
            ``(state, metrics)`` (or an object with ``state`` and ``metrics``).
        training_selection_fn: round number -> the clients' data of the round.
        total_rounds: the number of training rounds.
        evaluation_fn: ``(state, data) -> mapping of metrics``.
        evaluation_selection_fn: round number -> evaluation data.
        rounds_per_evaluation: rounds between evaluations.
        program_state_manager: a `simharness.program.ProgramStateManager`.
        rounds_per_saving_program_state: rounds between saves.
        metrics_managers: `simharness.program.ReleaseManager` objects.

    Returns:
        The state after the last round.
    """
    managers = list(metrics_managers) if metrics_managers is not None else None
    _LOG.info('Running training process')
    program_state, previous_version = None, 0
    if program_state_manager is not None:
        structure = training_process.initialize()
        program_state, previous_version = _run(lambda: program_state_manager.load_latest(structure))
    if program_state is not None:
        _LOG.info('Loaded program state at version %d', previous_version)
        state = program_state
        start_round = previous_version + 1
    else:
        _LOG.info('Initializing training process')
        state = training_process.initialize()
        start_round = 1
        if evaluation_fn is not None and evaluation_selection_fn is not None:
            metrics = _run_evaluation(evaluation_fn, evaluation_selection_fn, state, 0)
            if managers is not None:
                _run(_gather([m.release(metrics, key=0) for m in managers]))
        if program_state_manager is not None:
            _run(lambda: program_state_manager.save(state, 0))

    for round_num in range(start_round, total_rounds + 1):
        _LOG.info('Starting round %d', round_num)
        round_metrics: collections.OrderedDict = collections.OrderedDict()
        state, training_metrics = _run_training(
            training_process.next, training_selection_fn, state, round_num
        )
        if managers is not None:
            round_metrics.update(training_metrics)
        if evaluation_fn is not None and evaluation_selection_fn is not None:
            if round_num % rounds_per_evaluation == 0:
                evaluation_metrics = _run_evaluation(
                    evaluation_fn, evaluation_selection_fn, state, round_num
                )
                if managers is not None:
                    round_metrics.update(evaluation_metrics)
        if managers is not None:
            _run(_gather([m.release(round_metrics, key=round_num) for m in managers]))
        if program_state_manager is not None and round_num % rounds_per_saving_program_state == 0:
            _run(lambda: program_state_manager.save(state, round_num))  # noqa: B023
    return state
