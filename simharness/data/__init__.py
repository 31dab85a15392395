"""Federated data sets: in memory, synthetic, scikit-learn digits, from files.

Importing this package imports neither TensorFlow nor scikit-learn; they
are imported by the functions that need them.
"""

from simharness.data.benchmarks import (
    load_cifar100,
    load_emnist,
    load_hf_dataset,
    load_shakespeare,
    load_stackoverflow,
)
from simharness.data.client_data import (
    ArrayClientData,
    ArraySpec,
    ClientData,
    ConcreteClientData,
    PreprocessClientData,
    StackedRows,
    TestClientData,
    sample_clients,
)
from simharness.data.sampling import available_clients, sample_cohort
from simharness.data.digits import dirichlet_partition, iid_partition, load_digits_federated
from simharness.data.files import FileClientData, save_npz_dir
from simharness.data.sourced import Pad, SourcedClients
from simharness.data.synthetic import synthetic_alpha_beta

__all__ = [
    'ArrayClientData',
    'ArraySpec',
    'ClientData',
    'ConcreteClientData',
    'PreprocessClientData',
    'TestClientData',
    'FileClientData',
    'Pad',
    'SourcedClients',
    'StackedRows',
    'dirichlet_partition',
    'iid_partition',
    'available_clients',
    'load_cifar100',
    'load_digits_federated',
    'load_emnist',
    'load_hf_dataset',
    'load_shakespeare',
    'load_stackoverflow',
    'sample_cohort',
    'sample_clients',
    'save_npz_dir',
    'synthetic_alpha_beta',
]
