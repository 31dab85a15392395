"""Program logic for federated learning (``tff.learning.programs``).

* `train_model(*, train_process, train_data_source, ...)`: the training loop
  of a federated program, resumable (`ProgramState` saved every round), with
  evaluations forked off through an `EvaluationManager`.
* `EvaluationManager`: runs, tracks and resumes evaluation loops.
* `extract_and_rewrap_metrics`: moves a metrics sub-structure to ``model_metrics``.

They run in a `simharness.program.NativeFederatedContext`; see
docs/tff/learning-programs.md. TFF 0.88's `train_model_with_vizier` is left
out (it needs Google Vizier).
"""

from simharness.learning.programs.evaluation_program_logic import (
    EvaluationManager,
    extract_and_rewrap_metrics,
)
from simharness.learning.programs.training_program_logic import ProgramState, train_model

__all__ = ['EvaluationManager', 'ProgramState', 'extract_and_rewrap_metrics', 'train_model']
