"""`TrainModelProgramLogic` (``tff.learning.programs``): the protocol training program logic follows.

Federated programs compose program logic of this shape (`train_model` is one).
"""

from __future__ import annotations

import datetime
import typing
from typing import Optional, Protocol, Union

from simharness.learning.programs import evaluation_program_logic
from simharness.learning.templates import composers, learning_process
from simharness.program import data_source
from simharness.program import program_state_manager as program_state_manager_lib
from simharness.program import release_manager

__all__ = ['TrainModelProgramLogic']


@typing.runtime_checkable
class TrainModelProgramLogic(Protocol):
    """The signature of training program logic (keyword arguments only)."""

    async def __call__(
        self,
        *,
        train_process: learning_process.LearningProcess,
        initial_train_state: composers.LearningAlgorithmState,
        train_data_source: data_source.FederatedDataSource,
        train_per_round_clients: int,
        train_total_rounds: int,
        program_state_manager: program_state_manager_lib.ProgramStateManager,
        model_output_manager: release_manager.ReleaseManager,
        train_metrics_manager: Optional[release_manager.ReleaseManager] = None,
        evaluation_manager: Optional[evaluation_program_logic.EvaluationManager],
        evaluation_periodicity: Union[int, datetime.timedelta],
    ) -> None: ...
