"""The padded-array learning processes (formerly ``simharness.learning.algorithms``).

Superseded by TFF's shapes in `simharness.learning.algorithms` (datasets per
client, ``model_fn``, optimizer ``build_*`` functions); the config layer and
the CLI still build these until they move onto TFF's builders, then this
module goes.

Every builder returns a `LearningProcess` with ``initialize()``,
``next(state, client_data) -> LearningProcessOutput(state, metrics)`` and
``evaluate(weights, client_data)``; its computations are built from the
public intrinsics only, so it runs on every stack (thread, local, process)
with the same bits::

    build_weighted_fed_avg(model, client_optimizer, server_optimizer, aggregator)
        FedAvg; FedAvgM (server SGD with momentum), FedAdam, FedYogi, FedAdagrad
        (server adam / yogi / adagrad): Reddi et al. 2021
    build_fed_prox(model, proximal_strength, ...)   FedProx (Li et al. 2020)
    build_fed_sgd(model, server_optimizer, ...)     FedSGD: one gradient per client
    build_fed_eval(model)                           federated evaluation only
    build_algorithm(name, model, ...)               by name: 'fedavg', 'fedavgm', 'fedadam',
                                                    'fedyogi', 'fedadagrad', 'fedprox', 'fedsgd'

One round::

    sent@CLIENTS  = federated_broadcast(<weights, clip norm>)
    out@CLIENTS   = federated_map(client_update, <sent, data>)   local training, clip, quantize
    update@SERVER = mean / sum / secure sum of out.update          (the aggregator)
    metrics       = federated_sum(out.metrics)                     loss and metric states
    state@SERVER  = federated_map(server_update, <state, update>)  noise, server optimizer step

Client data are padded tensors ``x [N, ...], y [N, ...], n`` (`pad`): all
clients have equal shapes, padding is masked, a client with n examples
takes ``ceil(n / batch_size)`` steps per epoch in stored order.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.data.sourced import Pad, SourcedClients
from simharness.errors import ConfigError, SimharnessValueError
from simharness.learning import optimizers as O
from simharness.learning.aggregators import Aggregator
from simharness.learning.functional import FunctionalModel

#: Algorithm names of `build_algorithm` (and of ``[algorithm] name`` in configs).
ALGORITHM_NAMES = ('fedadagrad', 'fedadam', 'fedavg', 'fedavgm', 'fedprox', 'fedsgd', 'fedyogi')

#: Local training is unrolled into straight-line TF up to this many steps.
UNROLL_LIMIT = 64


class LearningProcessOutput(NamedTuple):
    """What `LearningProcess.next` returns (TFF's name; unpacks as ``state, metrics``)."""

    state: Any
    metrics: Dict[str, float]


def _tensor(shape: Tuple[int, ...], dtype: Any) -> T.TensorType:
    return T.TensorType(np.dtype(dtype), tuple(shape))


def _list_type(arrays: Sequence[np.ndarray]) -> T.StructType:
    return T.StructType([_tensor(a.shape, a.dtype) for a in arrays], container=list)


class LearningProcess:
    """A federated algorithm over a `FunctionalModel` (built by the ``build_*`` functions).

    Attributes:
      model: the model.
      max_examples: padded examples per client (a multiple of the batch size).
      state_type, data_type: types of the server state and of one client's data.
    """

    def __init__(self, model: FunctionalModel, *, max_examples: int, batch_size: int = 10,
                 local_epochs: int = 1, client_optimizer: Optional[O.Optimizer] = None,
                 server_optimizer: Optional[O.Optimizer] = None,
                 aggregator: Optional[Aggregator] = None, proximal_strength: float = 0.0,
                 fed_sgd: bool = False, name: str = 'fedavg'):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if not isinstance(model, FunctionalModel):
            raise ConfigError(f'model must be a FunctionalModel (from_keras_model or '
                              f'from_model_spec), got {type(model).__name__}', key='model')
        for key, v in (('max_examples', max_examples), ('batch_size', batch_size),
                       ('local_epochs', local_epochs)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f'{key} must be an int >= 1, got {v!r}', key=key, value=v)
        if isinstance(proximal_strength, bool) or not isinstance(proximal_strength, (int, float)) \
                or not proximal_strength >= 0:
            raise ConfigError(f'proximal_strength must be a number >= 0, got '
                              f'{proximal_strength!r}', key='proximal_strength',
                              value=proximal_strength)
        self.name = name
        self.model = model
        self.aggregator = aggregator or Aggregator()
        agg = self.aggregator
        self.client_optimizer = client_optimizer or O.SGD(0.05)
        self.server_optimizer = server_optimizer or O.SGD(1.0)
        B = batch_size
        self.batch_size = B
        self.max_examples = N = int(math.ceil(max_examples / B) * B)
        spec = model.input_spec
        self.fed_sgd = fed_sgd
        nt = model.num_trainable
        shapes = [s for s, _ in model.weight_specs]
        w_type = T.StructType([_tensor(s, d) for s, d in model.weight_specs], container=list)
        self.weights_type = w_type
        train_shapes = shapes[:nt]
        opt_state0 = self.server_optimizer.initialize(train_shapes)
        metric_states = [m.initial_state() for m in model.metrics]
        data_type = T.StructType([('x', _tensor((N,) + spec.x_shape, spec.x_dtype)),
                                  ('y', _tensor((N,) + spec.y_shape, spec.y_dtype)),
                                  ('n', T.TensorType(np.int32))],
                                 container=collections.OrderedDict)
        state_type = T.StructType([
            ('weights', w_type), ('optimizer', _list_type(opt_state0)),
            ('aggregator', T.StructType([np.float32], container=list)),
            ('round_num', np.int32)], container=collections.OrderedDict)
        self.state_type, self.data_type = state_type, data_type
        sent_type = T.StructType([('weights', w_type), ('clip', np.float32),
                                  ('round_num', np.int32)], container=collections.OrderedDict)
        epochs, mu = local_epochs, float(proximal_strength)
        copt = self.client_optimizer
        sopt = self.server_optimizer
        max_steps = N // B

        def batch_loss(w, xb, yb, mask, training):
            pred, new_nt = model.predict(w, xb, training)
            per = model.per_example_loss(yb, pred)
            count = tf.reduce_sum(mask)
            loss = tf.reduce_sum(per * mask) / tf.maximum(count, 1.0)
            return loss, pred, new_nt, count

        def update_metrics(mstates, yb, pred, mask):
            weights = model.label_weights(yb, mask)
            return [m.update(s, yb, pred, weights) for m, s in zip(model.metrics, mstates)]

        def zero_metrics():
            return [[tf.constant(a) for a in s] for s in metric_states]

        def select(active, new, old):
            return [tf.where(active, a, b) for a, b in zip(new, old)]

        @tf_computation(sent_type, data_type)
        def client_update(sent, data):
            x, y, n = data['x'], data['y'], data['n']
            weights = [tf.identity(v) for v in sent['weights']]
            tw0, ntw = weights[:nt], weights[nt:]
            mstates = zero_metrics()
            if fed_sgd:
                mask = tf.cast(tf.range(N) < n, tf.float32)
                with tf.GradientTape() as tape:
                    tape.watch(tw0)
                    loss, pred, _, count = batch_loss(tw0 + ntw, x, y, mask, True)
                grads = _dense(tape.gradient(loss, tw0), tw0)
                update = [-g for g in grads]
                loss_sum, ex = loss * count, count
                mstates = update_metrics(mstates, y, pred, mask)
            else:
                opt0 = [tf.constant(a) for a in copt.initialize(train_shapes)]

                def step(start, carry):
                    tw, nw, opt, loss_sum, ex, ms = carry
                    xb = x[start:start + B] if isinstance(start, int) else tf.slice(
                        x, tf.concat([[start], tf.zeros([x.shape.rank - 1], tf.int32)], 0),
                        [B] + list(x.shape[1:]))
                    yb = y[start:start + B] if isinstance(start, int) else tf.slice(
                        y, tf.concat([[start], tf.zeros([y.shape.rank - 1], tf.int32)], 0),
                        [B] + list(y.shape[1:]))
                    mask = tf.cast(start + tf.range(B) < n, tf.float32)
                    with tf.GradientTape() as tape:
                        tape.watch(tw)
                        loss, pred, new_nt, count = batch_loss(tw + nw, xb, yb, mask, True)
                        if mu > 0:
                            loss = loss + 0.5 * mu * tf.add_n(
                                [tf.reduce_sum(tf.square(a - b)) for a, b in zip(tw, tw0)])
                    grads = _dense(tape.gradient(loss, tw), tw)
                    new_opt, new_tw = copt.next(opt, tw, grads)
                    active = count > 0
                    # A step past the client's data has an all-zero mask: it leaves the
                    # weights and the optimizer state exactly as they were.
                    tw = select(active, new_tw, tw)
                    opt = select(active, new_opt, opt)
                    if new_nt:
                        nw = select(active, [tf.cast(v, a.dtype) for v, a in zip(new_nt, nw)], nw)
                    ms = update_metrics(ms, yb, pred, mask)
                    return tw, nw, opt, loss_sum + loss * count, ex + count, ms

                carry = (tw0, ntw, opt0, tf.constant(0.0), tf.constant(0.0), mstates)
                if epochs * max_steps <= UNROLL_LIMIT:
                    for _ in range(epochs):
                        for j in range(max_steps):
                            carry = step(j * B, carry)
                else:
                    steps = (n + B - 1) // B

                    def body(i, *c):
                        start = (i % tf.maximum(steps, 1)) * B
                        return (i + 1,) + tuple(step(start, c))

                    out = tf.while_loop(lambda i, *_: i < steps * epochs, body,
                                        (tf.constant(0),) + carry)
                    carry = tuple(out[1:])
                tw, _, _, loss_sum, ex, mstates = carry
                update = [a - b for a, b in zip(tw, tw0)]
            update, unclipped = agg.client_process(update, sent['clip'], sent['round_num'])
            metrics = collections.OrderedDict(loss_sum=loss_sum, num_examples=ex)
            for i, s in enumerate(mstates):
                metrics[f'm{i}'] = list(s)
            weight = tf.cast(n, tf.float32) if agg.weighted else tf.constant(1.0)
            return collections.OrderedDict(update=update, weight=weight, metrics=metrics,
                                           counts=collections.OrderedDict(
                                               clients=tf.constant(1.0), unclipped=unclipped))

        update_type = T.StructType(
            [_tensor(s, np.int32 if agg.secure else d) for s, d in model.weight_specs[:nt]],
            container=list)
        counts_type = T.StructType([('clients', np.float32), ('unclipped', np.float32)],
                                   container=collections.OrderedDict)

        @tf_computation(state_type, update_type, counts_type)
        def server_update(state, total, counts):
            weights = list(state['weights'])
            clip = state['aggregator'][0]
            mean, new_clip, _ = agg.server_finalize(list(total), counts['clients'],
                                                    counts['unclipped'], clip,
                                                    state['round_num'])
            new_opt, new_tw = sopt.next(list(state['optimizer']), weights[:nt],
                                        [-u for u in mean])
            return collections.OrderedDict(weights=list(new_tw) + weights[nt:],
                                           optimizer=list(new_opt), aggregator=[new_clip],
                                           round_num=state['round_num'] + 1)

        @tf_computation(state_type, update_type, counts_type)
        def measure(state, total, counts):
            _, _, m = agg.server_finalize(list(total), counts['clients'], counts['unclipped'],
                                          state['aggregator'][0], state['round_num'])
            return collections.OrderedDict(
                [(k, tf.cast(m[k], tf.float32)) for k in agg.measurement_names()]
                + [('clients', counts['clients'])])

        @tf_computation(state_type)
        def to_clients(state):
            return collections.OrderedDict(weights=list(state['weights']),
                                           clip=state['aggregator'][0],
                                           round_num=state['round_num'])

        @federated_computation(T.type_at_server(state_type), T.type_at_clients(data_type))
        def round_fn(state, data):
            sent = I.federated_broadcast(I.federated_map(to_clients, state))
            out = I.federated_map(client_update, I.federated_zip([sent, data]))
            if agg.secure:
                total = I.federated_secure_sum_bitwidth(out.update, agg.quantize_bits)
            elif agg.noise_multiplier > 0:
                total = I.federated_sum(out.update)
            elif agg.weighted:
                total = I.federated_mean(out.update, weight=out.weight)
            else:
                total = I.federated_mean(out.update)
            counts = I.federated_sum(out.counts)
            metrics = I.federated_sum(out.metrics)
            both = I.federated_zip([state, total, counts])
            new_state = I.federated_map(server_update, both)
            return new_state, metrics, I.federated_map(measure, both)

        @tf_computation(w_type, data_type)
        def client_eval(weights, data):
            x, y, n = data['x'], data['y'], data['n']
            mask = tf.cast(tf.range(N) < n, tf.float32)
            loss, pred, _, count = batch_loss(list(weights), x, y, mask, False)
            metrics = collections.OrderedDict(loss_sum=loss * count, num_examples=count)
            for i, s in enumerate(update_metrics(zero_metrics(), y, pred, mask)):
                metrics[f'm{i}'] = list(s)
            return metrics

        @federated_computation(T.type_at_server(w_type), T.type_at_clients(data_type))
        def eval_fn(weights, data):
            out = I.federated_map(client_eval,
                                  I.federated_zip([I.federated_broadcast(weights), data]))
            return I.federated_sum(out)

        self.client_update = client_update
        self.round_computation = round_fn
        self.evaluate_computation = eval_fn

    # ---------------------------------------------------------------- API
    def initialize(self, weights: Optional[Sequence[np.ndarray]] = None, seed: int = 0
                   ) -> Dict[str, Any]:
        """The initial server state (the model's initial weights for `seed` unless given)."""
        w = [np.asarray(v) for v in (weights if weights is not None
                                     else self.model.initial_weights(seed))]
        expected = self.model.weight_specs
        if [(tuple(a.shape), a.dtype) for a in w] != expected:
            raise SimharnessValueError(f'initial weights {[(a.shape, a.dtype) for a in w]} do '
                                       f'not match the model {expected}')
        nt = self.model.num_trainable
        shapes = [a.shape for a in w[:nt]]
        return collections.OrderedDict(
            weights=w, optimizer=self.server_optimizer.initialize(shapes),
            aggregator=self.aggregator.initial_state(), round_num=np.int32(0))

    @staticmethod
    def get_model_weights(state: Mapping[str, Any]) -> List[np.ndarray]:
        return [np.asarray(w) for w in state['weights']]

    def set_model_weights(self, state: Mapping[str, Any], weights: Sequence[np.ndarray]
                          ) -> Dict[str, Any]:
        new = collections.OrderedDict(state)
        new['weights'] = [np.asarray(w, a.dtype) for w, a in
                          zip(weights, self.get_model_weights(state))]
        return new

    def padding(self, x_key: str = 'x', y_key: str = 'y') -> Pad:
        """The declarative transform of one client's arrays into this process's ``{'x', 'y', 'n'}``."""
        spec = self.model.input_spec
        return Pad(self.max_examples, x_key, y_key, np.dtype(spec.x_dtype).str,
                   np.dtype(spec.y_dtype).str, tuple(spec.x_shape), tuple(spec.y_shape))

    def pad(self, arrays: Sequence[Mapping[str, np.ndarray]], x_key: str = 'x',
            y_key: str = 'y') -> List[Dict[str, Any]]:
        """Per-client ``{'x', 'y', 'n'}`` padded with zeros to `max_examples` rows."""
        pad = self.padding(x_key, y_key)
        return [pad(a) for a in arrays]

    def sourced(self, client_data: Any, client_ids: Sequence[str], x_key: str = 'x',
                y_key: str = 'y') -> SourcedClients:
        """The clients `client_ids` of `client_data` by reference, padded as `pad` pads them.

        Pass the result to `next` or `evaluate` instead of `pad(...)`: the
        stack loads each client where it is computed (on the process stack
        each worker loads its own clients from a file-backed source; see
        `simharness.data.SourcedClients`), with the same bits as `pad`.
        """
        return SourcedClients(client_data, client_ids, self.padding(x_key, y_key))

    def next(self, state: Mapping[str, Any], client_data: Sequence[Mapping[str, Any]]
             ) -> LearningProcessOutput:
        """One round on padded client data (`pad`, or `sourced` by reference).

        Returns the new state and the round's metrics.

        Metrics: ``loss`` and each model metric over the cohort's training
        examples, ``num_examples``, ``clients``, and the aggregator's
        measurements (``clip_norm``, ``unclipped_fraction``, ``dp_noise_stddev``).
        """
        new_state, m, measured = self.round_computation(state, _as_clients(client_data))
        out = self._summarize(m)
        out.update({k: float(v) for k, v in measured.items()})
        return LearningProcessOutput(_plain_state(new_state), out)

    def evaluate(self, weights: Sequence[np.ndarray], client_data: Sequence[Mapping[str, Any]]
                 ) -> Dict[str, float]:
        """Federated evaluation of `weights` on padded client data (loss and metrics)."""
        data = _as_clients(client_data)
        return self._summarize(self.evaluate_computation(list(weights), data))

    def _summarize(self, m: Mapping[str, Any]) -> Dict[str, float]:
        n = float(m['num_examples'])
        out = {'loss': float(m['loss_sum']) / n if n else float('nan')}
        for i, metric in enumerate(self.model.metrics):
            out[metric.name] = metric.result([np.asarray(v) for v in m[f'm{i}']])
        out['num_examples'] = n
        return out


def _as_clients(client_data: Any) -> Any:
    """Clients by reference (`SourcedClients`) stay a reference; anything else becomes a list."""
    return client_data if isinstance(client_data, SourcedClients) else list(client_data)


def _dense(grads: Sequence[Any], weights: Sequence[Any]) -> List[Any]:
    """Gradients as dense tensors (an embedding's IndexedSlices; zeros for unused weights)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return [tf.zeros_like(w) if g is None else tf.convert_to_tensor(g)
            for g, w in zip(grads, weights)]


def _plain_state(state: Mapping[str, Any]) -> Dict[str, Any]:
    return collections.OrderedDict(
        weights=[np.asarray(w) for w in state['weights']],
        optimizer=[np.asarray(w) for w in state['optimizer']],
        aggregator=[np.asarray(w) for w in state['aggregator']],
        round_num=np.int32(state['round_num']))


# ----------------------------------------------------------------- builders

def build_weighted_fed_avg(model: FunctionalModel, client_optimizer: Optional[O.Optimizer] = None,
                           server_optimizer: Optional[O.Optimizer] = None, *,
                           max_examples: int, batch_size: int = 10, local_epochs: int = 1,
                           aggregator: Optional[Aggregator] = None) -> LearningProcess:
    """FedAvg (McMahan et al. 2017) with any client and server optimizer.

    Server SGD with momentum is FedAvgM; server Adam / Yogi / Adagrad are
    FedAdam / FedYogi / FedAdagrad.
    """
    return LearningProcess(model, max_examples=max_examples, batch_size=batch_size,
                           local_epochs=local_epochs, client_optimizer=client_optimizer,
                           server_optimizer=server_optimizer, aggregator=aggregator)


def build_fed_prox(model: FunctionalModel, proximal_strength: float,
                   client_optimizer: Optional[O.Optimizer] = None,
                   server_optimizer: Optional[O.Optimizer] = None, *, max_examples: int,
                   batch_size: int = 10, local_epochs: int = 1,
                   aggregator: Optional[Aggregator] = None) -> LearningProcess:
    """FedProx: local loss + ``proximal_strength / 2 * ||w - w_server||^2``."""
    if isinstance(proximal_strength, bool) or not isinstance(proximal_strength, (int, float)) \
            or not proximal_strength > 0:
        raise ConfigError(f'FedProx needs proximal_strength > 0, got {proximal_strength!r}',
                          key='proximal_strength', value=proximal_strength)
    return LearningProcess(model, max_examples=max_examples, batch_size=batch_size,
                           local_epochs=local_epochs, client_optimizer=client_optimizer,
                           server_optimizer=server_optimizer, aggregator=aggregator,
                           proximal_strength=proximal_strength, name='fedprox')


def build_fed_sgd(model: FunctionalModel, server_optimizer: Optional[O.Optimizer] = None, *,
                  max_examples: int, aggregator: Optional[Aggregator] = None) -> LearningProcess:
    """FedSGD: each client sends the gradient of its mean loss over all its examples."""
    return LearningProcess(model, max_examples=max_examples, batch_size=max_examples,
                           server_optimizer=server_optimizer or O.SGD(0.1),
                           aggregator=aggregator, fed_sgd=True, name='fedsgd')


def build_fed_eval(model: FunctionalModel, *, max_examples: int) -> LearningProcess:
    """A process for federated evaluation (use its ``evaluate``)."""
    return LearningProcess(model, max_examples=max_examples, name='fedeval')


def build_algorithm(name: str, model: FunctionalModel, *, max_examples: int,
                    client_learning_rate: float = 0.05, local_epochs: int = 1,
                    batch_size: int = 10, server_learning_rate: float = 1.0,
                    server_momentum: float = 0.0, client_optimizer: str = 'sgd',
                    client_momentum: float = 0.0, server_optimizer: Optional[str] = None,
                    beta_1: float = 0.9, beta_2: float = 0.999, epsilon: Optional[float] = None,
                    proximal_strength: float = 0.01,
                    aggregator: Optional[Aggregator] = None) -> LearningProcess:
    """An algorithm by name (one of `ALGORITHM_NAMES`), with flat hyper-parameters.

    The server optimizer follows from the name (fedavg / fedprox / fedsgd:
    sgd with `server_momentum`; fedavgm: sgd with `server_momentum`, 0.9
    when 0; fedadam / fedyogi / fedadagrad: adam / yogi / adagrad) unless
    `server_optimizer` names one.
    """
    if name not in ALGORITHM_NAMES:
        raise ConfigError(f'unknown algorithm {name!r}; allowed: '
                          f'{", ".join(repr(a) for a in ALGORITHM_NAMES)}', key='algorithm.name',
                          value=name)
    default = {'fedadam': 'adam', 'fedyogi': 'yogi', 'fedadagrad': 'adagrad'}.get(name, 'sgd')
    sname = server_optimizer or default
    momentum = server_momentum if not (name == 'fedavgm' and server_momentum == 0) else 0.9
    sopt = O.build(sname, server_learning_rate, momentum=momentum, beta_1=beta_1, beta_2=beta_2,
                   epsilon=epsilon)
    copt = O.build(client_optimizer, client_learning_rate, momentum=client_momentum)
    if name == 'fedsgd':
        return build_fed_sgd(model, sopt, max_examples=max_examples, aggregator=aggregator)
    if name == 'fedprox':
        return build_fed_prox(model, proximal_strength, copt, sopt, max_examples=max_examples,
                              batch_size=batch_size, local_epochs=local_epochs,
                              aggregator=aggregator)
    p = build_weighted_fed_avg(model, copt, sopt, max_examples=max_examples,
                               batch_size=batch_size, local_epochs=local_epochs,
                               aggregator=aggregator)
    p.name = name
    return p
