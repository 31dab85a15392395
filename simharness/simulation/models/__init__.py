"""Models for simulations: TFF's `tff.simulation.models` (`mnist`)."""

from simharness.simulation.models import mnist

__all__ = ['mnist']
