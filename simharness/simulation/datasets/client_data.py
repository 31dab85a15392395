"""`tff.simulation.datasets.client_data`: the one `ClientData` family (defined in simharness.data)."""

from simharness.data.client_base import (
    ClientData,
    ConcreteClientData,
    IncompatiblePreprocessFnError,
    InvalidRandomSeedError,
    PreprocessClientData,
    check_numpy_random_seed,
    is_nonnegative_32_bit_int,
)

__all__ = [
    'ClientData',
    'ConcreteClientData',
    'IncompatiblePreprocessFnError',
    'InvalidRandomSeedError',
    'PreprocessClientData',
    'check_numpy_random_seed',
    'is_nonnegative_32_bit_int',
]
