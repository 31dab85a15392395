"""The FedAvg reference workload with its client update in JAX.

The workload of ``shared/benchmarks/fedavg-synthetic-mlp.md`` (the data, MLP
60-256-256-10, initial weights and hyper-parameters of
`simharness.learning.reference_fedavg_workload`), written as a TFF user writes FedAvg
with JAX: the client update (5 plain SGD steps of batch 10, learning rate 0.05, softmax
cross-entropy) and the server update are `tff.jax.computation`s, composed with the
intrinsics in a `tff.federated_computation` round::

    w_c = federated_broadcast(w)
    delta, n = federated_map(client_update, federated_zip([w_c, data]))
    w' = federated_map(server_update, federated_zip([w, federated_mean(delta, weight=n)]))

A client's data is one struct of its stored arrays, ``x`` float32 [50, 60] and ``y``
int32 [50] (in stored order, no shuffling); the round returns the new weights and the
round's example count (``federated_sum(n)``).
"""

from __future__ import annotations

import collections
from typing import Callable, List, NamedTuple, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

import simharness as tff

__all__ = [
    'BATCH_SIZE',
    'LEARNING_RATE',
    'NUM_EXAMPLES',
    'ReferenceRound',
    'client_update_fn',
    'jax_reference_round',
    'reference_clients',
]

#: Examples per client, batch size and SGD learning rate of the reference workload.
NUM_EXAMPLES = 50
BATCH_SIZE = 10
LEARNING_RATE = 0.05
NUM_FEATURES = 60

_SHAPES = ((60, 256), (256,), (256, 256), (256,), (256, 10), (10,))


def _logits(w: Sequence[jax.Array], x: jax.Array) -> jax.Array:
    h = jax.nn.relu(x @ w[0] + w[1])
    h = jax.nn.relu(h @ w[2] + w[3])
    return h @ w[4] + w[5]


def _loss(w: Sequence[jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(_logits(w, x))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def client_update_fn(
    weights: Sequence[jax.Array], data: 'collections.OrderedDict[str, jax.Array]'
) -> Tuple[Tuple[jax.Array, ...], jax.Array]:
    """The reference client update as plain JAX: ``(w_local - w, n)``.

    One epoch of plain SGD over the client's examples in stored order, in batches of
    `BATCH_SIZE` (5 steps), ``w <- w - LEARNING_RATE * grad(mean CE)``.
    """
    x, y = data['x'], data['y']
    w = tuple(weights)
    grad = jax.grad(_loss)
    for b in range(x.shape[0] // BATCH_SIZE):
        lo = b * BATCH_SIZE
        g = grad(w, x[lo : lo + BATCH_SIZE], y[lo : lo + BATCH_SIZE])
        w = tuple(p - LEARNING_RATE * d for p, d in zip(w, g))
    return tuple(a - b for a, b in zip(w, weights)), jnp.float32(x.shape[0])


class ReferenceRound(NamedTuple):
    """The round and its parts (`jax_reference_round`)."""

    #: ``(server weights, clients' data) -> (new weights, example count)``.
    next: Callable[..., object]
    #: The client update, a `tff.jax.computation` ``(<weights, data> -> <delta, n>)``.
    client_update: object
    #: The server update, a `tff.jax.computation` ``(<weights, mean delta> -> weights)``.
    server_update: object


def jax_reference_round(vectorize: bool = False) -> ReferenceRound:
    """The reference FedAvg round with JAX client and server updates.

    Args:
      vectorize: make the client update a vectorized computation
        (``tff.jax.computation(..., vectorize=True)``: a worker runs a block of its
        clients as one `jax.vmap`ped call; see docs/tff/jax.md).

    Returns:
      The round (`ReferenceRound.next`: called with the server weights, a tuple of six
      float32 arrays, and a list of clients' data from `reference_clients`).
    """
    model_type = tff.to_type(tuple(tff.TensorType(np.float32, s) for s in _SHAPES))
    data_type = tff.to_type(
        collections.OrderedDict(
            x=tff.TensorType(np.float32, (NUM_EXAMPLES, NUM_FEATURES)),
            y=tff.TensorType(np.int32, (NUM_EXAMPLES,)),
        )
    )
    options = {'vectorize': True} if vectorize else {}

    @tff.jax.computation(model_type, data_type, **options)
    def client_update(weights, data):
        return client_update_fn(weights, data)

    @tff.jax.computation(model_type, model_type)
    def server_update(weights, mean_delta):
        return tuple(w + d for w, d in zip(weights, mean_delta))

    @tff.federated_computation(tff.type_at_server(model_type), tff.type_at_clients(data_type))
    def next_fn(server_weights, data):
        weights_at_clients = tff.federated_broadcast(server_weights)
        out = tff.federated_map(client_update, tff.federated_zip([weights_at_clients, data]))
        mean_delta = tff.federated_mean(out[0], weight=out[1])
        new_weights = tff.federated_map(
            server_update, tff.federated_zip([server_weights, mean_delta])
        )
        return new_weights, tff.federated_sum(out[1])

    return ReferenceRound(next_fn, client_update, server_update)


def reference_clients() -> Tuple[
    List['collections.OrderedDict[str, np.ndarray]'], List[np.ndarray]
]:
    """The reference workload's 1000 clients' data, in the round's form, and the initial
    weights (W0, b0, W1, b1, W2, b2: `simharness.learning.reference_fedavg_workload`)."""
    from simharness.learning import reference_fedavg_workload  # pylint: disable=import-outside-toplevel

    cd, w0 = reference_fedavg_workload()
    clients = []
    for c in cd.client_ids:
        arrays = cd.client_arrays(c)
        clients.append(
            collections.OrderedDict(
                x=np.ascontiguousarray(arrays['x'], np.float32),
                y=np.ascontiguousarray(arrays['y'], np.int32),
            )
        )
    return clients, [np.asarray(w, np.float32) for w in w0]
