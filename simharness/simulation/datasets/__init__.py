"""Datasets for simulations: TFF's `tff.simulation.datasets`.

One `ClientData` family (simharness.data): `TestClientData` in memory,
`FilePerUserClientData` and `SqlClientData` from files, and the loaders of
TFF's published data sets (`emnist`, `cifar100`, `shakespeare`,
`stackoverflow`, `gldv2`), which read TFF's files from a local directory (the first
four download a missing one from TFF's bucket, as TFF's: `simharness.data.tff_files`);
each has `get_synthetic()` with the same element structure.
"""

from simharness.simulation.datasets import cifar100, emnist, gldv2, shakespeare, stackoverflow
from simharness.simulation.datasets.client_data import ClientData
from simharness.simulation.datasets.dataset_utils import (
    build_dataset_mixture,
    build_single_label_dataset,
    build_synthethic_iid_datasets,
)
from simharness.data.tff_files import DatasetFileNotFoundError
from simharness.simulation.datasets.file_per_user_client_data import FilePerUserClientData
from simharness.simulation.datasets.from_tensor_slices_client_data import TestClientData
from simharness.simulation.datasets.sql_client_data import SqlClientData
from simharness.simulation.datasets.sql_client_data_utils import (
    load_and_parse_sql_client_data,
    save_to_sql_client_data,
)
from simharness.simulation.datasets.transforming_client_data import TransformingClientData

__all__ = [
    'ClientData',
    'DatasetFileNotFoundError',
    'FilePerUserClientData',
    'SqlClientData',
    'TestClientData',
    'TransformingClientData',
    'build_dataset_mixture',
    'build_single_label_dataset',
    'build_synthethic_iid_datasets',
    'cifar100',
    'emnist',
    'gldv2',
    'load_and_parse_sql_client_data',
    'save_to_sql_client_data',
    'shakespeare',
    'stackoverflow',
]
