"""Port of TFF's ``core/environments/jax_frontend/jax_computation_context_test.py`` (TFF
0.87), with a check that JAX code calling a computation meets the context."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip('jax', reason='the JAX frontend needs JAX: pip install -e ".[jax]"')

import simharness as tff  # noqa: E402
from simharness.jax import jax_computation, jax_computation_context  # noqa: E402


def test_ingest_raises_not_implemented_error():
    context = jax_computation_context.JaxComputationContext()
    with pytest.raises(NotImplementedError, match='JAX code is not currently supported'):
        context.ingest(10, np.int32)


def test_invoke_raises_not_implemented_error():
    @jax_computation.jax_computation
    def foo():
        return 10

    context = jax_computation_context.JaxComputationContext()
    with pytest.raises(NotImplementedError, match='JAX code is not currently supported'):
        context.invoke(foo, None)


def test_a_computation_called_from_jax_code_meets_the_context():
    @tff.tensorflow.computation
    def one():
        return 1

    with pytest.raises(NotImplementedError, match='JAX code is not currently supported'):

        @tff.jax.computation
        def calls_one():
            return one()
