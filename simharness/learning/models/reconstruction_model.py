"""Models for federated reconstruction (``tff.learning.models.ReconstructionModel``).

A `ReconstructionModel` splits its variables into global ones (trained and
aggregated on the server) and local ones (reconstructed on each client at
the start of a round, never sent). `forward_pass` returns a
`ReconstructionBatchOutput(predictions, labels, num_examples)`; the loss and
metrics belong to the process that uses the model.

Keras 3 models come in through `from_keras_model_and_layers` (variables by
layer) or `from_keras_model_and_variables`; the model must not be compiled,
and the four variable lists must partition its variables.
`build_dataset_split_fn` makes TFF's `ReconstructionDatasetSplitFn`
(reconstruction and post-reconstruction datasets of one client's dataset).
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, Optional, Protocol, Sequence, cast

import keras
import tensorflow as tf

from simharness.core import types as T
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import Batch, InputSpec, ModelVariable, TensorStructure
from simharness.learning.models import keras_seeds, model_weights, variable

__all__ = [
    'ReconstructionBatchOutput',
    'ReconstructionDatasetSplitFn',
    'ReconstructionModel',
    'global_weights_type_from_model',
]

#: ``client dataset -> (reconstruction dataset, post-reconstruction dataset)``.
ReconstructionDatasetSplitFn = Callable[[tf.data.Dataset], tuple[tf.data.Dataset, tf.data.Dataset]]


class ReconstructionBatchOutput(NamedTuple):
    """The output of `ReconstructionModel.forward_pass` (every field may be None).

    Attributes:
        predictions: the predictions on the batch's examples.
        labels: the labels of the examples.
        num_examples: the number of examples (an int32 scalar).
    """

    predictions: TensorStructure
    labels: TensorStructure
    num_examples: tf.Tensor


class ReconstructionModel(metaclass=abc.ABCMeta):
    """A model of global and local variables for federated reconstruction.

    Global variables are aggregated on the server; local variables stay on
    the client and are reconstructed (initialized and trained) there each
    round, before the global ones are trained. Variables are created in
    ``__init__``; the methods are traced into graphs.
    """

    @property
    @abc.abstractmethod
    def global_trainable_variables(self) -> Sequence[ModelVariable]:
        """The trainable variables aggregated on the server."""

    @property
    @abc.abstractmethod
    def global_non_trainable_variables(self) -> Sequence[ModelVariable]:
        """The non-trainable variables aggregated on the server."""

    @property
    @abc.abstractmethod
    def local_trainable_variables(self) -> Sequence[ModelVariable]:
        """The trainable variables reconstructed on each client."""

    @property
    @abc.abstractmethod
    def local_non_trainable_variables(self) -> Sequence[ModelVariable]:
        """The non-trainable variables reconstructed on each client."""

    @property
    @abc.abstractmethod
    def input_spec(self) -> InputSpec:
        """The (structure of) `tf.TensorSpec` of a batch: ``(x, y)`` or ``{'x', 'y'}``."""

    @abc.abstractmethod
    def forward_pass(self, batch_input: Batch, training: bool = True) -> ReconstructionBatchOutput:
        """The `ReconstructionBatchOutput` of `batch_input` (changes no model parameter)."""

    @classmethod
    def get_global_variables(cls, model: 'ReconstructionModel') -> model_weights.ModelWeights:
        """The global variables of `model` as `ModelWeights`."""
        return model_weights.ModelWeights(
            trainable=model.global_trainable_variables,
            non_trainable=model.global_non_trainable_variables,
        )

    @classmethod
    def get_local_variables(cls, model: 'ReconstructionModel') -> model_weights.ModelWeights:
        """The local variables of `model` as `ModelWeights`."""
        return model_weights.ModelWeights(
            trainable=model.local_trainable_variables,
            non_trainable=model.local_non_trainable_variables,
        )

    @classmethod
    def has_only_global_variables(cls, model: 'ReconstructionModel') -> bool:
        """Whether `model` has no local variables."""
        return not (
            bool(model.local_trainable_variables) or bool(model.local_non_trainable_variables)
        )

    @classmethod
    def simple_dataset_split_fn(
        cls, client_dataset: tf.data.Dataset
    ) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """A `ReconstructionDatasetSplitFn` giving the client's dataset for both stages."""
        return client_dataset, client_dataset

    @classmethod
    def build_dataset_split_fn(
        cls,
        recon_epochs: int = 1,
        recon_steps_max: Optional[int] = None,
        post_recon_epochs: int = 1,
        post_recon_steps_max: Optional[int] = None,
        split_dataset: bool = False,
    ) -> ReconstructionDatasetSplitFn:
        """A `ReconstructionDatasetSplitFn` of epochs, step limits and an optional split.

        Args:
            recon_epochs: passes over the data during reconstruction.
            recon_steps_max: at most this many batches in reconstruction (after
                the epochs); None: no limit.
            post_recon_epochs: passes over the data after reconstruction.
            post_recon_steps_max: at most this many batches after
                reconstruction; None: no limit.
            split_dataset: even-indexed batches for reconstruction, odd-indexed
                after (the dataset must iterate in the same order each time);
                False: the whole dataset for both.
        """
        recon_condition = lambda i, _: tf.equal(tf.math.floormod(i, 2), 0)  # noqa: E731
        post_recon_condition = lambda i, _: tf.greater(tf.math.floormod(i, 2), 0)  # noqa: E731
        get_entry = lambda _, entry: entry  # noqa: E731

        def dataset_split_fn(
            client_dataset: tf.data.Dataset,
        ) -> tuple[tf.data.Dataset, tf.data.Dataset]:
            if split_dataset:
                recon_dataset = client_dataset.enumerate().filter(recon_condition).map(get_entry)
                post_recon_dataset = (
                    client_dataset.enumerate().filter(post_recon_condition).map(get_entry)
                )
            else:
                recon_dataset = client_dataset
                post_recon_dataset = client_dataset
            recon_dataset = recon_dataset.repeat(recon_epochs)
            if recon_steps_max is not None:
                recon_dataset = recon_dataset.take(recon_steps_max)
            post_recon_dataset = post_recon_dataset.repeat(post_recon_epochs)
            if post_recon_steps_max is not None:
                post_recon_dataset = post_recon_dataset.take(post_recon_steps_max)
            return recon_dataset, post_recon_dataset

        return dataset_split_fn

    @classmethod
    def read_metric_variables(cls, metrics: list) -> 'collections.OrderedDict[str, list]':
        """``{metric name: [its variables' values]}`` of Keras metrics.

        Raises:
            SimharnessValueError: two metrics have one name.
        """
        metric_variables: collections.OrderedDict = collections.OrderedDict()
        for metric in metrics:
            if metric.name in metric_variables:
                raise SimharnessValueError(
                    f'Duplicate metric name detected: {metric.name}. '
                    f'Already saw metrics {list(metric_variables.keys())}'
                )
            metric_variables[metric.name] = [tf.identity(_tf_variable(v)) for v in metric.variables]
        return metric_variables

    @classmethod
    def from_keras_model_and_layers(
        cls,
        keras_model: keras.Model,
        *,
        global_layers: Iterable[keras.layers.Layer],
        local_layers: Iterable[keras.layers.Layer],
        input_spec: InputSpec,
    ) -> 'ReconstructionModel':
        """A `ReconstructionModel` of `keras_model` whose variables are split by layer.

        An unbuilt model is built by calling it once on zeros of the ``x`` part
        of `input_spec`.

        Raises:
            SimharnessTypeError: `keras_model` is not a Keras model.
            SimharnessValueError: the model is compiled, `input_spec` is not a
                pair (or a mapping with ``x`` and ``y``), or the layers'
                variables do not partition the model's.
        """
        if not getattr(keras_model, 'built', True):
            _validate_input_spec(input_spec)
            if isinstance(input_spec, Mapping):
                model_argument_spec = input_spec[variable.MODEL_ARG_NAME]
            else:
                model_argument_spec = input_spec[0]
            # Keras 3 builds a subclassed model's variables only when called: call it
            # on a batch of zeros (one example per unknown dimension).
            keras_model(
                tf.nest.map_structure(
                    lambda spec: tf.zeros([1 if d is None else d for d in spec.shape], spec.dtype),
                    model_argument_spec,
                ),
                training=False,
            )
        global_trainable, global_non_trainable = [], []
        for layer in global_layers:
            global_trainable.extend(layer.trainable_variables)
            global_non_trainable.extend(layer.non_trainable_variables)
        local_trainable, local_non_trainable = [], []
        for layer in local_layers:
            local_trainable.extend(layer.trainable_variables)
            local_non_trainable.extend(layer.non_trainable_variables)
        return cls.from_keras_model_and_variables(
            keras_model=keras_model,
            global_trainable_variables=global_trainable,
            global_non_trainable_variables=global_non_trainable,
            local_trainable_variables=local_trainable,
            local_non_trainable_variables=local_non_trainable,
            input_spec=input_spec,
        )

    @classmethod
    def from_keras_model_and_variables(
        cls,
        keras_model: keras.Model,
        *,
        global_trainable_variables: Iterable[ModelVariable],
        global_non_trainable_variables: Iterable[ModelVariable],
        local_trainable_variables: Iterable[ModelVariable],
        local_non_trainable_variables: Iterable[ModelVariable],
        input_spec: InputSpec,
    ) -> 'ReconstructionModel':
        """A `ReconstructionModel` of `keras_model` with its variables in four disjoint lists.

        Raises:
            SimharnessTypeError: `keras_model` is not a Keras model.
            SimharnessValueError: the model is compiled or not built,
                `input_spec` is not a pair (or a mapping with ``x`` and ``y``),
                the lists overlap, or they do not hold exactly the model's
                variables.
        """
        return _KerasReconstructionModel(
            inner_model=keras_model,
            global_trainable_variables=global_trainable_variables,
            global_non_trainable_variables=global_non_trainable_variables,
            local_trainable_variables=local_trainable_variables,
            local_non_trainable_variables=local_non_trainable_variables,
            input_spec=input_spec,
        )


def _tf_variable(v: ModelVariable) -> tf.Variable:
    return v.value if isinstance(v, keras.Variable) else v


class _VariableRef(Protocol):
    """A variable's hashable identity (``v.ref()``)."""

    def deref(self) -> tf.Variable: ...


def _ref(v: ModelVariable) -> _VariableRef:
    return _tf_variable(v).ref()


def _name(v: ModelVariable) -> str:
    return getattr(v, 'path', None) or v.name


def _validate_input_spec(input_spec: InputSpec) -> None:
    if len(input_spec) != 2:
        raise SimharnessValueError(
            'The top-level structure in `input_spec` must contain exactly two top-level '
            'elements, as it must specify type information for both inputs to and predictions '
            f'from the model. You passed input spec {input_spec}.'
        )
    if isinstance(input_spec, Mapping):
        for key, what in (
            (variable.MODEL_ARG_NAME, 'the input(s) to the Keras model'),
            (variable.MODEL_LABEL_NAME, 'the label(s) to be used in the Keras loss(es)'),
        ):
            if key not in input_spec:
                raise SimharnessValueError(
                    'The `input_spec` is a `collections.abc.Mapping` (e.g., a `dict`), so it '
                    f"must contain an entry with key '{key}', representing {what}."
                )


class _KerasReconstructionModel(ReconstructionModel):
    """A Keras model as a `ReconstructionModel` (global and local variables given)."""

    def __init__(
        self,
        inner_model: keras.Model,
        global_trainable_variables: Iterable[ModelVariable],
        global_non_trainable_variables: Iterable[ModelVariable],
        local_trainable_variables: Iterable[ModelVariable],
        local_non_trainable_variables: Iterable[ModelVariable],
        input_spec: InputSpec,
    ):
        if not isinstance(inner_model, keras.Model):
            raise SimharnessTypeError(
                f'Expected `inner_model` to be type `keras.Model`, found {type(inner_model)}',
                expected=keras.Model,
                actual=type(inner_model),
            )
        if getattr(inner_model, 'compiled', False):
            raise SimharnessValueError('`inner_model` must not be compiled.')
        if not inner_model.built:
            raise SimharnessValueError(
                "`inner_model` must be built. Please add a call to the Keras model's `build()` "
                'method before using the Keras model to construct a `ReconstructionModel`.'
            )
        _validate_input_spec(input_spec)
        self._keras_model = inner_model
        # Keras 3's seed states are not weights (`keras_seeds`): left out of the lists (a
        # layer's `non_trainable_variables` holds them), set per training step instead.
        self._seeds = keras_seeds.KerasSeeds(inner_model)
        seeds = {_ref(v) for v in self._seeds.states}

        def weights(variables: Iterable[ModelVariable]) -> list:
            return [v for v in variables if _ref(v) not in seeds]

        self._global_trainable_variables = weights(global_trainable_variables)
        self._global_non_trainable_variables = weights(global_non_trainable_variables)
        self._local_trainable_variables = weights(local_trainable_variables)
        self._local_non_trainable_variables = weights(local_non_trainable_variables)
        self._input_spec = input_spec
        var_refs_sets = {
            'global_trainable_variables': {_ref(v) for v in self._global_trainable_variables},
            'global_non_trainable_variables': {
                _ref(v) for v in self._global_non_trainable_variables
            },
            'local_trainable_variables': {_ref(v) for v in self._local_trainable_variables},
            'local_non_trainable_variables': {_ref(v) for v in self._local_non_trainable_variables},
        }
        for first_key in list(var_refs_sets):
            first = var_refs_sets.pop(first_key)
            for second_key, second in var_refs_sets.items():
                if first & second:
                    raise SimharnessValueError(
                        f'The variables must be disjoint, but {first_key} and {second_key} '
                        'lists both contains these variables: '
                        f'{sorted(_name(r.deref()) for r in first & second)}.'
                    )
        given = {
            (_ref(v), _name(v))
            for v in (
                self._global_trainable_variables
                + self._global_non_trainable_variables
                + self._local_trainable_variables
                + self._local_non_trainable_variables
            )
        }
        in_keras = {
            (_ref(v), _name(v))
            for v in (
                list(inner_model.trainable_variables)
                + keras_seeds.KerasSeeds.weights_of(inner_model)
            )
        }
        if given != in_keras:
            difference = sorted(name for _, name in given ^ in_keras)
            raise SimharnessValueError(
                'Global and local variables must include all trainable and non-trainable '
                f'variables in the Keras model. Difference: {difference}, Global and local '
                f'vars: {sorted(n for _, n in given)}, Keras vars: '
                f'{sorted(n for _, n in in_keras)}'
            )

    @property
    def global_trainable_variables(self) -> list:
        return self._global_trainable_variables

    @property
    def global_non_trainable_variables(self) -> list:
        return self._global_non_trainable_variables

    @property
    def local_trainable_variables(self) -> list:
        return self._local_trainable_variables

    @property
    def local_non_trainable_variables(self) -> list:
        return self._local_non_trainable_variables

    @property
    def input_spec(self) -> InputSpec:
        return self._input_spec

    @tf.function
    def forward_pass(self, batch_input: Batch, training: bool = True) -> ReconstructionBatchOutput:
        if hasattr(batch_input, '_asdict'):
            batch_input = batch_input._asdict()
        if isinstance(batch_input, Mapping):
            inputs = batch_input.get('x')
        else:
            inputs = batch_input[0]
        if inputs is None:
            # (a mapping without `x`: an `x` of None in a sequence fails at `.keys`)
            keys = cast(Mapping[str, TensorStructure], batch_input).keys()
            raise KeyError(
                'Received a batch_input that is missing required key `x`. Instead '
                f'have keys {list(keys)}'
            )
        self._seeds.assign(self._keras_model.trainable_variables, inputs, training)
        predictions = self._keras_model(inputs, training=training)
        y_true = batch_input.get('y') if isinstance(batch_input, Mapping) else batch_input[1]
        return ReconstructionBatchOutput(
            predictions=predictions,
            labels=y_true,
            num_examples=tf.shape(tf.nest.flatten(inputs)[0])[0],
        )


def global_weights_type_from_model(model: ReconstructionModel) -> T.StructType:
    """The type of the global variables of `model`, as a `ModelWeights` struct."""
    weights = ReconstructionModel.get_global_variables(model)
    specs = tf.nest.map_structure(
        lambda v: tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)),
        model_weights.ModelWeights(list(weights.trainable), list(weights.non_trainable)),
    )
    result = T.to_type(specs)
    assert isinstance(result, T.StructType)  # a ModelWeights of lists
    return result
