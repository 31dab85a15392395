"""Models for simulations: TFF's `tff.simulation.models` (`mnist`, `mobilenet_v2`)."""

from simharness.simulation.models import mnist, mobilenet_v2

__all__ = ['mnist', 'mobilenet_v2']
