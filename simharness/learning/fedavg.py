"""Federated Averaging, built from the public intrinsics.

Vocabulary as in `tff.learning`: `initialize()` gives the server state,
`next(state, client_data)` runs one round and returns the new state and the
round's metrics; `evaluate(weights, client_data)` is federated evaluation.

One round::

    weights@CLIENTS = federated_broadcast(state.weights)
    out@CLIENTS     = federated_map(client_update, <weights, data>)   # local SGD
                      # out: n_k * delta_k, n_k, metrics (loss sum, correct, examples)
    totals@SERVER   = federated_sum(out)
    state@SERVER    = federated_map(server_update, <state, totals>)   # mean, SGD(+momentum)
    metrics@SERVER  = totals.metrics

The mean is the reference's ``sum_k(n_k * delta_k) / sum_k(n_k)``: the
products are made in the client's computation (XLA-compiled with it when it
is), so a worker folds its clients with additions only.

Client data travels as padded tensors ``x [N, ...], y [N], n`` (N: the most
examples any client has, rounded up to the batch size), so that all clients
have equal shapes and a worker runs its block of clients through one TF
call. Padding is masked: a client with n examples takes exactly
``ceil(n / batch_size)`` steps per epoch over its first n examples, in
stored order, each step the mean loss over the batch's real examples.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.core import intrinsics as I
from simharness.data.client_data import ArrayClientData
from simharness.data.sourced import Pad, SourcedClients
from simharness.data.sourced import pad_client  # noqa: F401  (public here too)
from simharness.data.synthetic import synthetic_alpha_beta
from simharness.errors import ConfigError
from simharness.learning import models as M
from simharness.validation import check_int


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
    """Hyper-parameters of FedAvg.

    Attributes:
      client_learning_rate: local SGD step size.
      local_epochs: passes over the client's data per round.
      batch_size: examples per local step.
      server_learning_rate: step size of the server update.
      server_momentum: momentum of the server SGD (0: plain averaging).
    """

    client_learning_rate: float = 0.05
    local_epochs: int = 1
    batch_size: int = 10
    server_learning_rate: float = 1.0
    server_momentum: float = 0.0

    def __post_init__(self):
        for key in ('client_learning_rate', 'server_learning_rate'):
            v = getattr(self, key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f'{key} must be a number > 0, got {v!r}', key=key, value=v)
        for key in ('local_epochs', 'batch_size'):
            check_int(key, getattr(self, key), 1)
        m = self.server_momentum
        if not isinstance(m, (int, float)) or isinstance(m, bool) or not 0 <= m < 1:
            raise ConfigError(
                f'server_momentum must be a number in [0, 1), got {m!r}',
                key='server_momentum',
                value=m,
            )


def pad_clients(
    arrays: Sequence[Mapping[str, np.ndarray]],
    max_examples: int,
    x_key: str = 'x',
    y_key: str = 'y',
) -> List[Dict[str, Any]]:
    """Per-client dicts ``{'x', 'y', 'n'}`` padded with zeros to `max_examples` rows."""
    return [pad_client(a, max_examples, x_key, y_key) for a in arrays]


#: Local training is unrolled into straight-line TF up to this many steps
#: (faster than a while loop); longer training uses a `tf.while_loop`.
UNROLL_LIMIT = 64


class FedAvg:
    """FedAvg for a `ModelSpec`, as federated computations.

    Args:
      model: the model architecture.
      config: hyper-parameters.
      max_examples: the padded number of examples per client (rounded up to
        a multiple of the batch size).
    """

    def __init__(self, model: M.ModelSpec, config: FedAvgConfig, max_examples: int):
        import tensorflow as tf

        max_examples = check_int('max_examples', max_examples, 1)
        self.model = model
        self.config = config
        B = config.batch_size
        self.max_examples = int(math.ceil(max_examples / B) * B)
        N = self.max_examples
        shapes = [tuple(s) for s in model.weight_shapes]
        w_type = T.StructType([T.TensorType(np.float32, s) for s in shapes], container=list)
        data_type = T.StructType(
            [
                ('x', T.TensorType(np.float32, (N,) + tuple(model.input_shape))),
                ('y', T.TensorType(np.int32, (N,))),
                ('n', T.TensorType(np.int32)),
            ],
            container=collections.OrderedDict,
        )
        state_type = T.StructType(
            [('weights', w_type), ('momentum', w_type), ('round_num', np.int32)],
            container=collections.OrderedDict,
        )
        self.weights_type, self.data_type, self.state_type = w_type, data_type, state_type
        max_steps = N // B
        lr, epochs, mom, slr = (
            config.client_learning_rate,
            config.local_epochs,
            config.server_momentum,
            config.server_learning_rate,
        )

        def batch_stats(w, xb, yb, mask):
            logits = M.forward(model, w, xb)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits)
            count = tf.reduce_sum(mask)
            loss = tf.reduce_sum(ce * mask) / tf.maximum(count, 1.0)
            pred = tf.cast(tf.argmax(logits, axis=1, output_type=tf.int32), tf.int32)
            correct = tf.reduce_sum(tf.cast(tf.equal(pred, yb), tf.float32) * mask)
            return loss, correct, count

        @tf_computation(w_type, data_type)
        def client_update(weights, data):
            x, y, n = data['x'], data['y'], data['n']
            steps = (n + B - 1) // B
            w0 = [tf.identity(v) for v in weights]

            def body(i, w, loss_sum, correct, count):
                start = (i % tf.maximum(steps, 1)) * B
                xb = tf.slice(
                    x,
                    tf.concat([[start], tf.zeros([x.shape.rank - 1], tf.int32)], 0),
                    [B] + list(x.shape[1:]),
                )
                yb = tf.slice(y, [start], [B])
                mask = tf.cast(start + tf.range(B) < n, tf.float32)
                with tf.GradientTape() as tape:
                    tape.watch(w)
                    loss, c, k = batch_stats(w, xb, yb, mask)
                grads = tape.gradient(loss, w)
                w = [v - lr * g for v, g in zip(w, grads)]
                return i + 1, w, loss_sum + loss * k, correct + c, count + k

            if epochs * max_steps <= UNROLL_LIMIT:
                # Unrolled: every client takes max_steps steps per epoch; steps
                # past its own ceil(n / B) have an all-zero mask, hence a zero
                # gradient, and leave the weights exactly unchanged.
                w, loss_sum, correct, count = w0, 0.0, 0.0, 0.0
                for _ in range(epochs):
                    for j in range(max_steps):
                        xb, yb = x[j * B : (j + 1) * B], y[j * B : (j + 1) * B]
                        mask = tf.cast(j * B + tf.range(B) < n, tf.float32)
                        with tf.GradientTape() as tape:
                            tape.watch(w)
                            loss, c, k = batch_stats(w, xb, yb, mask)
                        grads = tape.gradient(loss, w)
                        w = [v - lr * g for v, g in zip(w, grads)]
                        loss_sum, correct, count = loss_sum + loss * k, correct + c, count + k
            else:
                _, w, loss_sum, correct, count = tf.while_loop(
                    lambda i, *_: i < steps * epochs,
                    body,
                    (tf.constant(0), w0, tf.constant(0.0), tf.constant(0.0), tf.constant(0.0)),
                )
            # n_k * delta_k made here, in the client's computation (compiled with it when
            # it is): the server divides the sum of these by the sum of the n_k.
            n_k = tf.cast(n, tf.float32)
            return collections.OrderedDict(
                weighted_delta=[(a - b) * n_k for a, b in zip(w, w0)],
                num_examples=n_k,
                metrics=collections.OrderedDict(
                    loss_sum=loss_sum, correct=correct, num_examples=count
                ),
            )

        @tf_computation(w_type, data_type)
        def client_eval(weights, data):
            x, y, n = data['x'], data['y'], data['n']
            mask = tf.cast(tf.range(N) < n, tf.float32)
            loss, c, k = batch_stats(list(weights), x, y, mask)
            return collections.OrderedDict(loss_sum=loss * k, correct=c, num_examples=k)

        totals_type = client_update.type_signature.result

        @tf_computation(state_type, totals_type)
        def server_update(state, totals):
            # The example-weighted mean of the deltas: sum_k(n_k * delta_k) / sum_k(n_k).
            delta = [d / totals['num_examples'] for d in totals['weighted_delta']]
            new_m = [mom * m + d for m, d in zip(state['momentum'], delta)]
            new_w = [w + slr * m for w, m in zip(state['weights'], new_m)]
            return collections.OrderedDict(
                weights=new_w, momentum=new_m, round_num=state['round_num'] + 1
            )

        @tf_computation(state_type)
        def get_weights(state):
            return list(state['weights'])

        @federated_computation(T.type_at_server(state_type), T.type_at_clients(data_type))
        def round_fn(state, data):
            weights = I.federated_broadcast(I.federated_map(get_weights, state))
            out = I.federated_map(client_update, I.federated_zip([weights, data]))
            # One sum in the canonical order of everything the clients send: the n_k-weighted
            # deltas, the n_k and the metrics (numpy adds as rows are folded, no TF calls).
            totals = I.federated_sum(out)
            new_state = I.federated_map(server_update, I.federated_zip([state, totals]))
            return new_state, totals.metrics

        @federated_computation(T.type_at_server(w_type), T.type_at_clients(data_type))
        def evaluate_fn(weights, data):
            out = I.federated_map(
                client_eval, I.federated_zip([I.federated_broadcast(weights), data])
            )
            return I.federated_sum(out)

        self.client_update = client_update
        self.round_computation = round_fn
        self.evaluate_computation = evaluate_fn

    def initialize(
        self, weights: Optional[Sequence[np.ndarray]] = None, seed: int = 0
    ) -> Dict[str, Any]:
        """The initial server state (weights from `init_weights(model, seed)` unless given)."""
        w = [
            np.asarray(v, np.float32)
            for v in (weights if weights is not None else M.init_weights(self.model, seed))
        ]
        return collections.OrderedDict(
            weights=w, momentum=[np.zeros_like(v) for v in w], round_num=np.int32(0)
        )

    def pad(
        self, arrays: Sequence[Mapping[str, np.ndarray]], x_key: str = 'x', y_key: str = 'y'
    ) -> List[Dict[str, Any]]:
        return pad_clients(arrays, self.max_examples, x_key, y_key)

    def sourced(
        self, client_data: Any, client_ids: Sequence[str], x_key: str = 'x', y_key: str = 'y'
    ) -> SourcedClients:
        """Client data that each executor loads itself from `client_data` by id, padded.

        Pass the result to `next` or `evaluate` instead of `pad(...)`: on the
        process stack every worker loads only its own clients (see
        `simharness.data.SourcedClients`).
        """
        return SourcedClients(client_data, client_ids, Pad(self.max_examples, x_key, y_key))

    def next(
        self, state: Mapping[str, Any], client_data: Sequence[Mapping[str, Any]]
    ) -> Tuple[Dict[str, Any], Dict[str, float]]:
        """One round on padded client data (see `pad`); returns (state, metrics)."""
        new_state, m = self.round_computation(state, _as_clients(client_data))
        return new_state, _summarize(m)

    def evaluate(
        self, weights: Sequence[np.ndarray], client_data: Sequence[Mapping[str, Any]]
    ) -> Dict[str, float]:
        """Federated evaluation of `weights` on padded client data."""
        return _summarize(self.evaluate_computation(list(weights), _as_clients(client_data)))


def _as_clients(
    client_data: Union[SourcedClients, Sequence[Mapping[str, Any]]],
) -> Union[SourcedClients, List[Mapping[str, Any]]]:
    return client_data if isinstance(client_data, SourcedClients) else list(client_data)


def _summarize(m: Mapping[str, Union[np.ndarray, np.generic, float]]) -> Dict[str, float]:
    n = float(m['num_examples'])
    return {
        'loss': float(m['loss_sum']) / n if n else float('nan'),
        'accuracy': float(m['correct']) / n if n else float('nan'),
        'num_examples': n,
    }


def reference_fedavg_workload() -> Tuple[ArrayClientData, List[np.ndarray]]:
    """The FedAvg reference workload (``benchmarks/fedavg-synthetic-mlp.md``).

    Returns:
        ``(client_data, initial_weights)``: Synthetic(1, 1) with 1000 clients
        of 50 samples (x float32 [50, 60], y int32 [50]; ids '0'..'999'), and
        the MLP 60-256-256-10 initial weights as float32 arrays in the order
        W0, b0, W1, b1, W2, b2 (Glorot uniform from ``default_rng(1)`` in the
        order W0, W1, W2; zero biases). Their mean CE over all 50,000 samples
        (shared numpy evaluator) is 2.433921.
    """
    return synthetic_alpha_beta(), M.reference_mlp_init()
