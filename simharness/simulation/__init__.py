"""Libraries for running simulations: TFF's `tff.simulation`.

`datasets` (the `ClientData` family and TFF's data sets, read locally),
`build_uniform_sampling_fn`, `run_training_process` and the compositions of
a dataset computation with a computation, an iterative process or a
learning process; `baselines` (TFF's baseline tasks, loaded on first use:
it builds Keras models through `simharness.learning`).
"""

from simharness.simulation import datasets, models
from simharness.simulation.iterative_process_compositions import (
    SequenceTypeNotAssignableError,
    SequenceTypeNotFoundError,
    compose_dataset_computation_with_computation,
    compose_dataset_computation_with_iterative_process,
    compose_dataset_computation_with_learning_process,
)
from simharness.simulation.sampling_utils import build_uniform_sampling_fn
from simharness.simulation.training_loop import (
    EVALUATION_METRICS_PREFIX,
    EVALUATION_TIME_KEY,
    ROUND_NUMBER_KEY,
    ROUND_TIME_KEY,
    TRAINING_TIME_KEY,
    run_training_process,
)

__all__ = [
    'EVALUATION_METRICS_PREFIX',
    'EVALUATION_TIME_KEY',
    'ROUND_NUMBER_KEY',
    'ROUND_TIME_KEY',
    'SequenceTypeNotAssignableError',
    'SequenceTypeNotFoundError',
    'TRAINING_TIME_KEY',
    'build_uniform_sampling_fn',
    'compose_dataset_computation_with_computation',
    'compose_dataset_computation_with_iterative_process',
    'compose_dataset_computation_with_learning_process',
    'datasets',
    'models',
    'baselines',
    'run_training_process',
]


def __getattr__(name: str):
    if name == 'baselines':
        import importlib

        # reason: baselines imports simharness.learning (Keras); loaded on first use only.
        return importlib.import_module('simharness.simulation.baselines')
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
