"""Baseline learning tasks for simulation (TFF's ``tff.simulation.baselines``).

`ClientSpec` (how clients preprocess their data), `BaselineTaskDatasets`
(train / test / validation data and preprocessing), `BaselineTask` (datasets
and a ``model_fn``), and the task constructors of TFF's data sets: `emnist`
(character recognition, autoencoder), `cifar100` (image classification),
`shakespeare` (next-character prediction), `stackoverflow` (next-word and
tag prediction), `landmark` (GLDv2 image classification). Each ``create_*_task`` reads its
data with `tff.simulation.datasets.<name>.load_data` from local files (TFF's
SQLite files; nothing is downloaded); each ``create_*_task_from_datasets``
(``_with_datasets`` for CIFAR-100, as TFF) takes `ClientData` you give.
"""

from simharness.simulation.baselines import baseline_task, client_spec, keras_metrics, task_data
from simharness.simulation.baselines import cifar100, emnist, landmark, shakespeare, stackoverflow
from simharness.simulation.baselines.baseline_task import BaselineTask
from simharness.simulation.baselines.client_spec import ClientSpec
from simharness.simulation.baselines.task_data import BaselineTaskDatasets

__all__ = [
    'BaselineTask',
    'BaselineTaskDatasets',
    'ClientSpec',
    'baseline_task',
    'client_spec',
    'cifar100',
    'emnist',
    'keras_metrics',
    'landmark',
    'shakespeare',
    'stackoverflow',
    'task_data',
]
