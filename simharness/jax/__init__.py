"""`simharness.jax`: TFF's ``tff.jax`` namespace (the JAX frontend), on every stack.

``tff.jax.computation`` traces a Python function of JAX code into a serialized StableHLO
module (`jax.export`), held in a TF graph that runs it through XLA (``XlaCallModule``):
the thread stack runs it in the driver, worker processes (local, gRPC, Ray) run the
graph they receive as bytes, without JAX or the user's Python. docs/tff/jax.md tells
more.

Needs JAX: ``pip install -e ".[jax]"``; ``import simharness`` imports none of it
(``simharness.jax`` is loaded on first use).
"""

try:
    import jax as _jax  # noqa: F401  (JAX itself: the frontend traces with it)
except ImportError as _err:  # pragma: no cover - exercised without JAX installed
    raise ImportError(
        'simharness.jax (tff.jax) needs JAX: install it with pip install -e ".[jax]" '
        '(or pip install "jax[cpu]")'
    ) from _err

# The modules keep their names (TFF's tests import them: ``from ... import jax_computation``).
from simharness.jax import jax_computation, jax_computation_context, jax_serialization
from simharness.jax.jax_computation_context import JaxComputationContext

#: TFF's ``tff.jax.computation``.
computation = jax_computation.jax_computation

__all__ = [
    'JaxComputationContext',
    'computation',
    'jax_computation',
    'jax_computation_context',
    'jax_serialization',
]
