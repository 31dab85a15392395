"""TFF's 2021 learning API (v0.19) as thin aliases of today's algorithms.

TFF removed ``tff.learning.build_federated_averaging_process``,
``build_federated_evaluation`` and the top-level ``from_keras_model``; a 2021
program needs them, a 2026 program needs today's names, and no TFF release
has both. Here both run: each 2021 name is a wrapper over today's builder with
the same math, returning 2021's structures:

```
from_keras_model(keras_model, loss, input_spec, loss_weights, metrics)
    = tff.learning.models.from_keras_model (same signature, same model)
build_federated_averaging_process(model_fn, client_optimizer_fn, server_optimizer_fn, ...)
    = build_weighted_fed_avg (build_unweighted_fed_avg for an unweighted factory) with
      Keras SGD(learning_rate, momentum, nesterov) -> build_sgdm(same), and
    initialize: ( -> ServerState(model, optimizer_state, delta_aggregate_state,
                                 model_broadcast_state, client_work)@SERVER)
    next:       (<ServerState@SERVER, {B*}@CLIENTS> -> <ServerState@SERVER, M@SERVER>)
    M = OrderedDict(broadcast=, aggregation=, train=<model metrics>,
                    stat=OrderedDict(num_examples=))        (Keras models)
build_federated_sgd_process(model_fn, server_optimizer_fn, ...)
    = build_fed_sgd (weighted by examples) with Keras SGD -> build_sgdm, the same
      ServerState, and M = OrderedDict(broadcast=, aggregation=, train=<model metrics>,
      stat=OrderedDict(client_weight=<sum of weights>, has_non_finite_delta=<count>))
build_federated_evaluation(model_fn)
    = build_fed_eval: (<ModelWeights@SERVER, {B*}@CLIENTS> -> <model metrics>@SERVER)
framework.ServerState, framework.ModelWeights, framework.weights_type_from_model
    = 2021's ``tff.learning.framework`` names that today's classes carry exactly
```

``train`` (and the evaluation's result) hold the model's metrics as 2021
reported them: for a model of `from_keras_model` its Keras metrics then
``loss`` (today's ``num_examples`` / ``num_batches`` counters are left out;
``num_examples`` is 2021's ``stat``); for another `VariableModel`, what its
``metric_finalizers`` make. What has no exact counterpart raises a
`SimharnessTypeError` / `SimharnessValueError` naming the argument and
today's replacement (docs/tff/learning-algorithms.md lists them).
"""

from __future__ import annotations

import collections
import types
from typing import Callable, NamedTuple, Optional, Union

import tensorflow as tf

from simharness.aggregators import factory, mean
from simharness.core import intrinsics as I
from simharness.core import narrowing as N
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning.algorithms import fed_avg, fed_eval, fed_sgd
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.loop_builder import LoopImplementation
from simharness.learning.models import keras_utils, variable
from simharness.learning.models.keras_utils import from_keras_model
from simharness.learning.models.model_weights import ModelWeights, weights_type_from_model
from simharness.learning.optimizers import sgdm
from simharness.learning.optimizers.optimizer import Optimizer
from simharness.learning._typing import TemplateField
from simharness.learning.templates.composers import LearningAlgorithmState
from simharness.templates import AggregationProcess, MeasuredProcessOutput
from simharness.templates.iterative_process import IterativeProcess

__all__ = [
    'ServerState',
    'build_federated_averaging_process',
    'build_federated_evaluation',
    'build_federated_sgd_process',
    'framework',
    'from_keras_model',
    'state_with_new_model_weights',
]

#: What 2021's optimizer arguments were: a no-argument function making a Keras optimizer
#: (an `Optimizer` of today is taken as well).
OptimizerFn = Union[Callable[[], object], Optimizer]

#: Today's counters that 2021's Keras models did not report among their metrics.
_KERAS_COUNTERS = ('num_examples', 'num_batches')

#: Keras SGD settings with no counterpart in ``build_sgdm`` (a set one raises).
_KERAS_EXTRAS = ('weight_decay', 'clipnorm', 'clipvalue', 'global_clipnorm', 'loss_scale_factor')


class ServerState(NamedTuple):
    """2021's ``tff.learning.framework.ServerState``: the state of the FedAvg process.

    Attributes:
      model: the global `ModelWeights` (``trainable``, ``non_trainable``).
      optimizer_state: the server optimizer's state (today's finalizer state).
      delta_aggregate_state: the model-update aggregator's state.
      model_broadcast_state: the broadcast's state (``()`` by default).
      client_work: not in 2021: the client optimizer's hyperparameters, which
        today's process carries in its state.
    """

    model: TemplateField
    optimizer_state: TemplateField
    delta_aggregate_state: TemplateField
    model_broadcast_state: TemplateField
    client_work: TemplateField = ()


def _keras_sgd_as_optimizer(optimizer_fn: OptimizerFn, name: str) -> Optimizer:
    """``build_sgdm`` with the settings of the Keras SGD that `optimizer_fn` makes.

    Raises:
      SimharnessTypeError: `optimizer_fn` makes something other than a Keras SGD.
      SimharnessValueError: the SGD has a setting ``build_sgdm`` lacks.
    """
    if isinstance(optimizer_fn, Optimizer):
        return optimizer_fn
    if not callable(optimizer_fn):
        raise SimharnessTypeError(
            f'`{name}` must be a no-argument function returning a Keras optimizer, or a '
            f'`tff.learning.optimizers.Optimizer`; got {type(optimizer_fn).__name__}',
            expected=Optimizer,
            actual=type(optimizer_fn),
        )
    keras_optimizer = optimizer_fn()
    kind = type(keras_optimizer)
    get_config = getattr(keras_optimizer, 'get_config', None)
    if (
        kind.__name__ != 'SGD'
        or not kind.__module__.startswith(('keras', 'tf_keras'))
        or get_config is None
    ):
        raise SimharnessTypeError(
            f'`{name}` makes a {kind.__module__}.{kind.__name__}: only Keras SGD maps exactly '
            "onto today's optimizers (tff.learning.optimizers.build_sgdm). Pass today's "
            f'optimizer instead (e.g. `{name}=tff.learning.optimizers.build_adam(...)`), here '
            'or to tff.learning.algorithms.build_weighted_fed_avg.',
            expected=Optimizer,
            actual=kind,
        )
    config = get_config()
    learning_rate = config.get('learning_rate')
    if not isinstance(learning_rate, (int, float)):
        raise SimharnessValueError(
            f'`{name}`: a Keras SGD with learning rate {learning_rate!r} (a schedule) has no '
            'counterpart in build_sgdm; use '
            'tff.learning.algorithms.build_weighted_fed_avg_with_optimizer_schedule.'
        )
    extras = [k for k in _KERAS_EXTRAS if config.get(k) not in (None, 0, 0.0)]
    if config.get('use_ema'):
        extras.append('use_ema')
    if int(config.get('gradient_accumulation_steps') or 1) > 1:
        extras.append('gradient_accumulation_steps')
    if extras:
        raise SimharnessValueError(
            f'`{name}`: Keras SGD settings {extras} have no counterpart in '
            'tff.learning.optimizers.build_sgdm; pass a `tff.learning.optimizers.Optimizer` '
            '(or an aggregator doing the clipping) instead.'
        )
    momentum = float(config.get('momentum') or 0.0)
    return sgdm.build_sgdm(
        learning_rate=float(learning_rate),
        momentum=momentum or None,
        nesterov=bool(config.get('nesterov')) and momentum > 0,
    )


def _check_model(model_fn: Callable[[], variable.VariableModel]) -> bool:
    """Whether `model_fn` makes a model of `from_keras_model` (checked on one made here).

    Raises:
      SimharnessTypeError: it makes a 2021 ``tff.learning.Model`` or no `VariableModel`.
    """
    if not callable(model_fn):
        raise SimharnessTypeError(
            f'`model_fn` must be a no-argument function returning a model; got '
            f'{type(model_fn).__name__}',
            expected=variable.VariableModel,
            actual=type(model_fn),
        )
    model = model_fn()
    if not isinstance(model, variable.VariableModel):
        hint = (
            ' It is a 2021 `tff.learning.Model` (report_local_outputs / '
            'federated_output_computation): write report_local_unfinalized_metrics and '
            'metric_finalizers instead (tff.learning.models.VariableModel), or build it '
            'with tff.learning.from_keras_model.'
            if hasattr(model, 'report_local_outputs')
            else ''
        )
        raise SimharnessTypeError(
            f'`model_fn` returned a {type(model).__name__}, not a '
            f'tff.learning.models.VariableModel.{hint}',
            expected=variable.VariableModel,
            actual=type(model),
        )
    return isinstance(model, keras_utils.KerasModel)


def _loop(use_experimental_simulation_loop: bool) -> LoopImplementation:
    """2021's flag as today's loop: both run the client's dataset batch by batch."""
    return (
        LoopImplementation.DATASET_ITERATOR
        if use_experimental_simulation_loop
        else LoopImplementation.DATASET_REDUCE
    )


def _model_metrics(metrics: collections.OrderedDict, is_keras: bool) -> collections.OrderedDict:
    """The model's finalized metrics as 2021 reported them (no counters for Keras models)."""
    return collections.OrderedDict(
        (k, v) for k, v in metrics.items() if not (is_keras and k in _KERAS_COUNTERS)
    )


def _no_broadcast_process(broadcast_process: object) -> None:
    if broadcast_process is not None:
        raise SimharnessValueError(
            '`broadcast_process` (a 2021 MeasuredProcess) has no exact counterpart here; '
            'pass a `tff.learning.templates.DistributionProcess` as `model_distributor` to '
            'tff.learning.algorithms.build_weighted_fed_avg (or build_fed_eval) instead.'
        )


def build_federated_averaging_process(
    model_fn: Callable[[], variable.VariableModel],
    client_optimizer_fn: OptimizerFn,
    server_optimizer_fn: Optional[OptimizerFn] = None,
    *,
    client_weighting: Optional[ClientWeighting] = None,
    broadcast_process: object = None,
    model_update_aggregation_factory: Optional[factory.AggregationFactory] = None,
    use_experimental_simulation_loop: bool = False,
) -> IterativeProcess:
    """Federated averaging with 2021's signature and results (TFF v0.19's function).

    ::

        process = tff.learning.build_federated_averaging_process(
            model_fn, client_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.02))
        state = process.initialize()
        state, metrics = process.next(state, federated_train_data)
        metrics['train']['loss'], state.model.trainable

    Runs today's `build_weighted_fed_avg` (`build_unweighted_fed_avg` for an
    unweighted factory): the same client training, weighting and server
    step, so the same bits.

    Args:
      model_fn: a no-arg function returning a new `VariableModel` (e.g. of
        `from_keras_model`).
      client_optimizer_fn: a no-arg function returning a Keras SGD (momentum
        and nesterov allowed), or today's `Optimizer`.
      server_optimizer_fn: as `client_optimizer_fn`; default SGD at 1.0.
      client_weighting: a `ClientWeighting`; default NUM_EXAMPLES (UNIFORM
        with an unweighted factory).
      broadcast_process: must be None (see Raises).
      model_update_aggregation_factory: a weighted or unweighted factory;
        default `MeanFactory()`.
      use_experimental_simulation_loop: DATASET_ITERATOR if True, else
        DATASET_REDUCE.

    Returns:
      An `IterativeProcess` whose ``next`` returns ``(ServerState, metrics)``
      and with ``get_model_weights: (ServerState -> ModelWeights)``.

    Raises:
      SimharnessTypeError: an optimizer function makes no Keras SGD, the model
        is not a `VariableModel` (a 2021 ``tff.learning.Model``), or
        `client_weighting` is a callable.
      SimharnessValueError: `broadcast_process` is set, a Keras SGD setting has
        no counterpart, or NUM_EXAMPLES weighting is asked of an unweighted
        factory.
    """
    _no_broadcast_process(broadcast_process)
    if client_weighting is not None and not isinstance(client_weighting, ClientWeighting):
        raise SimharnessTypeError(
            "`client_weighting`: a callable of 2021's report_local_outputs has no counterpart "
            'today; use tff.learning.ClientWeighting.NUM_EXAMPLES or UNIFORM.',
            expected=ClientWeighting,
            actual=type(client_weighting),
        )
    is_keras = _check_model(model_fn)
    client_optimizer = _keras_sgd_as_optimizer(client_optimizer_fn, 'client_optimizer_fn')
    server_optimizer = (
        fed_avg.DEFAULT_SERVER_OPTIMIZER_FN()
        if server_optimizer_fn is None
        else _keras_sgd_as_optimizer(server_optimizer_fn, 'server_optimizer_fn')
    )
    loop = _loop(use_experimental_simulation_loop)
    if isinstance(model_update_aggregation_factory, factory.UnweightedAggregationFactory):
        if client_weighting not in (None, ClientWeighting.UNIFORM):
            raise SimharnessValueError(
                'Cannot use non-uniform client weighting with unweighted aggregation.'
            )
        process = fed_avg.build_unweighted_fed_avg(
            model_fn,
            client_optimizer,
            server_optimizer,
            model_aggregator=model_update_aggregation_factory,
            loop_implementation=loop,
        )
    else:  # 2021's UNIFORM without a factory: weights 1 into the weighted MeanFactory
        process = fed_avg.build_weighted_fed_avg(
            model_fn,
            client_optimizer,
            server_optimizer,
            client_weighting=client_weighting or ClientWeighting.NUM_EXAMPLES,
            model_aggregator=model_update_aggregation_factory,
            loop_implementation=loop,
        )
    return _as_2021_process(process, is_keras)


class _WithClientWeightStat(factory.WeightedAggregationFactory):
    """`inner`, measuring also 2021 FedSGD's ``stat``: the clients' weights summed and
    the clients whose update was not finite counted.

    Today's FedSGD client sends weight 0 exactly when its mean gradient is not
    finite (a client without examples included, as in 2021: 0 / 0), so the count
    is that of zero weights. The state and result are `inner`'s, unchanged.
    """

    def __init__(self, inner: factory.WeightedAggregationFactory):
        self._inner = inner

    def create(
        self, value_type: factory.ValueType, weight_type: factory.ValueType
    ) -> AggregationProcess:
        process = self._inner.create(value_type, weight_type)

        @tf_computation(weight_type)
        def client_stat(weight: tf.Tensor) -> collections.OrderedDict:
            return collections.OrderedDict(
                client_weight=weight,
                has_non_finite_delta=tf.cast(tf.equal(weight, 0.0), tf.int32),
            )

        @federated_computation(
            process.initialize.type_signature.result,
            T.FederatedType(value_type, T.CLIENTS),
            T.FederatedType(weight_type, T.CLIENTS),
        )
        def next_fn(state: Value, value: Value, weight: Value) -> MeasuredProcessOutput:
            output = process.next(state, value, weight)
            stat = I.federated_sum(I.federated_map(client_stat, weight))
            measurements = collections.OrderedDict(inner=output.measurements, stat=stat)
            return MeasuredProcessOutput(output.state, output.result, I.federated_zip(measurements))

        return AggregationProcess(process.initialize, next_fn)


def build_federated_sgd_process(
    model_fn: Callable[[], variable.VariableModel],
    server_optimizer_fn: Optional[OptimizerFn] = None,
    *,
    client_weighting: Optional[ClientWeighting] = None,
    broadcast_process: object = None,
    aggregation_process: object = None,
    model_update_aggregation_factory: Optional[factory.AggregationFactory] = None,
    use_experimental_simulation_loop: bool = False,
) -> IterativeProcess:
    """Federated SGD with 2021's signature and results (TFF v0.19's function).

    ::

        process = tff.learning.build_federated_sgd_process(
            model_fn, server_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.1))
        state = process.initialize()
        state, metrics = process.next(state, federated_train_data)
        metrics['train']['loss'], metrics['stat']['client_weight'], state.model.trainable

    Runs today's `build_fed_sgd`: each client's example-weighted mean gradient
    at the broadcast weights (zeros, weight 0, if not finite), averaged by
    example count and applied by the server optimizer; the same bits.

    Args:
      model_fn: a no-arg function returning a new `VariableModel`.
      server_optimizer_fn: a no-arg function returning a Keras SGD (momentum and
        nesterov allowed), or today's `Optimizer`; default SGD at 0.1.
      client_weighting: None or NUM_EXAMPLES (see Raises).
      broadcast_process, aggregation_process: must be None (see Raises).
      model_update_aggregation_factory: a weighted factory; default
        `MeanFactory()`.
      use_experimental_simulation_loop: DATASET_ITERATOR if True, else
        DATASET_REDUCE.

    Returns:
      An `IterativeProcess` whose ``next`` returns ``(ServerState, metrics)``
      and with ``get_model_weights: (ServerState -> ModelWeights)``.

    Raises:
      SimharnessTypeError: the server optimizer function makes no Keras SGD,
        the model is not a `VariableModel`, or `client_weighting` is a callable.
      SimharnessValueError: UNIFORM weighting or an unweighted factory (today's
        FedSGD weights by examples only), `broadcast_process` or
        `aggregation_process` set, or a Keras SGD setting with no counterpart.
    """
    _no_broadcast_process(broadcast_process)
    if aggregation_process is not None:
        raise SimharnessValueError(
            '`aggregation_process` (deprecated in 2021 already) has no counterpart here; '
            'pass a `tff.aggregators.WeightedAggregationFactory` as '
            '`model_update_aggregation_factory` instead.'
        )
    if client_weighting is not None and not isinstance(client_weighting, ClientWeighting):
        raise SimharnessTypeError(
            "`client_weighting`: a callable of 2021's report_local_outputs has no counterpart "
            'today; tff.learning.algorithms.build_fed_sgd weights clients by their examples.',
            expected=ClientWeighting,
            actual=type(client_weighting),
        )
    if client_weighting is ClientWeighting.UNIFORM or isinstance(
        model_update_aggregation_factory, factory.UnweightedAggregationFactory
    ):
        raise SimharnessValueError(
            'Federated SGD with UNIFORM client weighting (or an unweighted aggregation '
            'factory) has no counterpart today: tff.learning.algorithms.build_fed_sgd weights '
            'each client by its number of examples. Use the default weighting with a '
            'tff.aggregators.WeightedAggregationFactory.'
        )
    is_keras = _check_model(model_fn)
    server_optimizer = (
        fed_sgd.DEFAULT_SERVER_OPTIMIZER_FN
        if server_optimizer_fn is None
        else _keras_sgd_as_optimizer(server_optimizer_fn, 'server_optimizer_fn')
    )
    inner = model_update_aggregation_factory
    if inner is None:
        inner = mean.MeanFactory()
    process = fed_sgd.build_fed_sgd(
        model_fn,
        server_optimizer,
        model_aggregator=_WithClientWeightStat(inner),
        loop_implementation=_loop(use_experimental_simulation_loop),
    )
    return _as_2021_process(process, is_keras, aggregator_stat=True)


def _as_2021_process(
    process: IterativeProcess, is_keras: bool, aggregator_stat: bool = False
) -> IterativeProcess:
    """`process` (state `LearningAlgorithmState`) with 2021's state, result and metrics.

    With `aggregator_stat`, the aggregator's measurements are those of
    `_WithClientWeightStat` (FedSGD's ``stat``); else, for a Keras model,
    ``stat`` is FedAvg's ``num_examples``.
    """
    today_state_type = N.as_struct(N.member_of(process.initialize.type_signature.result))
    data_type = N.parameter_element(process.next.type_signature, 1)

    @tf_computation(today_state_type)
    def to_2021(state: LearningAlgorithmState) -> ServerState:
        return ServerState(
            model=state.global_model_weights,
            optimizer_state=state.finalizer,
            delta_aggregate_state=state.aggregator,
            model_broadcast_state=state.distributor,
            client_work=state.client_work,
        )

    state_type = N.as_struct(to_2021.type_signature.result)

    @tf_computation(state_type)
    def to_today(state: ServerState) -> LearningAlgorithmState:
        return LearningAlgorithmState(
            global_model_weights=state.model,
            distributor=state.model_broadcast_state,
            client_work=state.client_work,
            aggregator=state.delta_aggregate_state,
            finalizer=state.optimizer_state,
        )

    @federated_computation()
    def initialize() -> Value:
        return I.federated_map(to_2021, process.initialize())

    metrics_type = N.member_of(N.as_struct(process.next.type_signature.result)[1])

    @tf_computation(metrics_type)
    def metrics_2021(metrics: collections.OrderedDict) -> collections.OrderedDict:
        train = metrics['client_work']['train']
        aggregator = metrics['aggregator']
        out = collections.OrderedDict(
            broadcast=metrics['distributor'],
            aggregation=aggregator['inner'] if aggregator_stat else aggregator,
            train=_model_metrics(train, is_keras),
        )
        if aggregator_stat:
            out['stat'] = aggregator['stat']
        elif is_keras:
            out['stat'] = collections.OrderedDict(num_examples=train['num_examples'])
        return out

    @federated_computation(initialize.type_signature.result, data_type)
    def next_fn(state: Value, federated_dataset: Value) -> tuple[Value, Value]:
        output = process.next(I.federated_map(to_today, state), federated_dataset)
        return I.federated_map(to_2021, output.state), I.federated_map(metrics_2021, output.metrics)

    @tf_computation(state_type)
    def get_model_weights(state: ServerState) -> TemplateField:
        return state.model

    legacy = IterativeProcess(initialize, next_fn)
    setattr(legacy, 'get_model_weights', get_model_weights)  # 2021's extra member
    return legacy


def state_with_new_model_weights(
    server_state: ServerState, trainable_weights: list, non_trainable_weights: list
) -> ServerState:
    """`server_state` with its model's weights replaced (2021's function).

    Raises:
      SimharnessTypeError: the new weights differ from the old in number, shape
        or dtype.
    """

    def check(old: object, new: list, what: str) -> list:
        old_list = list(old) if isinstance(old, (list, tuple)) else [old]
        if len(old_list) != len(new) or any(
            tuple(getattr(o, 'shape', ())) != tuple(getattr(n, 'shape', ()))
            or getattr(o, 'dtype', None) != getattr(n, 'dtype', None)
            for o, n in zip(old_list, new)
        ):
            raise SimharnessTypeError(
                f"{what}: the new weights differ from the state's in number, shape or dtype",
                expected=type(old),
                actual=type(new),
            )
        return list(new)

    model = server_state.model
    if not isinstance(model, ModelWeights):
        raise SimharnessTypeError(
            f'server_state.model must be a ModelWeights, got {type(model).__name__}',
            expected=ModelWeights,
            actual=type(model),
        )
    return server_state._replace(
        model=ModelWeights(
            check(model.trainable, trainable_weights, 'trainable_weights'),
            check(model.non_trainable, non_trainable_weights, 'non_trainable_weights'),
        )
    )


def build_federated_evaluation(
    model_fn: Callable[[], variable.VariableModel],
    broadcast_process: object = None,
    use_experimental_simulation_loop: bool = False,
) -> Computation:
    """Federated evaluation with 2021's signature and result (TFF v0.19's function).

    ::

        evaluation = tff.learning.build_federated_evaluation(model_fn)
        metrics = evaluation(state.model, federated_test_data)  # OrderedDict(..., loss=)

    Runs today's `build_fed_eval` on the weights given and returns its
    current round's metrics (for a Keras model: its metrics then ``loss``).

    Raises:
      SimharnessTypeError: the model is not a `VariableModel`.
      SimharnessValueError: `broadcast_process` is set.
    """
    _no_broadcast_process(broadcast_process)
    is_keras = _check_model(model_fn)
    process = fed_eval.build_fed_eval(
        model_fn, loop_implementation=_loop(use_experimental_simulation_loop)
    )
    state_type = N.as_struct(N.member_of(process.initialize.type_signature.result))
    weights_type = state_type.global_model_weights
    data_type = N.parameter_element(process.next.type_signature, 1)
    metrics_type = N.member_of(N.as_struct(process.next.type_signature.result)[1])

    @tf_computation(metrics_type)
    def metrics_2021(metrics: collections.OrderedDict) -> collections.OrderedDict:
        return _model_metrics(metrics['client_work']['eval']['current_round_metrics'], is_keras)

    @federated_computation(T.FederatedType(weights_type, T.SERVER), data_type)
    def evaluation(model_weights: Value, federated_dataset: Value) -> Value:
        state = I.federated_map(
            process.set_model_weights, I.federated_zip((process.initialize(), model_weights))
        )
        return I.federated_map(metrics_2021, process.next(state, federated_dataset).metrics)

    return evaluation


#: 2021's ``tff.learning.framework`` names whose today's classes are exact: the
#: state of the 2021 processes here, the model weights and their type.
framework = types.SimpleNamespace(
    ServerState=ServerState,
    ModelWeights=ModelWeights,
    weights_type_from_model=weights_type_from_model,
)
