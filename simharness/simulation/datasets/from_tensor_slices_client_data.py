"""`tff.simulation.datasets.from_tensor_slices_client_data`: `TestClientData` (in simharness.data)."""

from simharness.data.client_data import TestClientData

__all__ = ['TestClientData']
