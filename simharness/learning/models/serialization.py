"""Saving models as TensorFlow SavedModels (``tff.learning.models.save`` / ``load`` / ...).

`save(model, path)` writes a `VariableModel` as a SavedModel: its variables,
``forward_pass`` and ``predict_on_batch`` (traced with ``training`` True and
False, outputs flattened), ``report_local_unfinalized_metrics``,
``reset_metrics`` and the metric finalizers; the default serving signature
is ``predict_on_batch`` for inference (usable by the TFLite converter).
`load(path)` gives back a `VariableModel` with the same behaviour (not the
same Python class). `save_functional_model` / `load_functional_model` do the
same for a `FunctionalModel` (initial weights, ``predict_on_batch``,
``loss``).

As TFF: result structures and the input spec are saved beside the graphs as
serialized types, and each metric finalizer as a serialized
`tf_computation`; here in simharness's codec (`simharness.runtime.codec`,
no pickle) where TFF writes protos. `metric_finalizers()` of a loaded model
gives those computations.
"""

from __future__ import annotations

import collections
import functools
from typing import Callable, Optional, Protocol, Union, cast

import tensorflow as tf

from simharness.core import types as T
from simharness.core.building_blocks import ComputationBuildingBlock
from simharness.core.computation import Computation, ConcreteComputation, tf_computation
from simharness.core.tf_serialization import element_spec_for
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import (
    Finalizer,
    InputSpec,
    SpecStructure,
    TensorLeaf,
    TensorStructure,
)
from simharness.learning.models import functional, keras_utils, variable
from simharness.program import serialization_utils

__all__ = ['load', 'load_functional_model', 'save', 'save_functional_model']


class _SavedVariableModel(Protocol):
    """What `save` writes into a SavedModel, as `tf.saved_model.load` gives it back."""

    tff_trainable_variables: list
    tff_non_trainable_variables: list
    tff_local_variables: list
    flat_forward_pass_training: tf.types.experimental.ConcreteFunction
    flat_forward_pass_inference: tf.types.experimental.ConcreteFunction
    forward_pass_training_type_spec: tf.Variable
    forward_pass_inference_type_spec: tf.Variable
    predict_on_batch_training: tf.types.experimental.ConcreteFunction
    predict_on_batch_inference: tf.types.experimental.ConcreteFunction
    predict_on_batch_training_type_spec: tf.Variable
    predict_on_batch_inference_type_spec: tf.Variable
    serialized_input_spec: tf.Variable
    report_local_unfinalized_metrics: tf.types.experimental.ConcreteFunction
    serialized_metric_finalizers: dict


class _SavedFunctionalModel(Protocol):
    """What `save_functional_model` writes into a SavedModel, as loaded: calling it reads
    the initial weights."""

    predict_on_batch_training: tf.types.experimental.ConcreteFunction
    predict_on_batch_inference: tf.types.experimental.ConcreteFunction
    predict_on_batch_training_type_spec: tf.Variable
    predict_on_batch_inference_type_spec: tf.Variable
    loss: tf.types.experimental.ConcreteFunction
    loss_type_spec: tf.Variable
    serialized_input_spec: tf.Variable

    def __call__(self) -> TensorStructure: ...


def _check_path(path: object, what: str) -> None:
    if not isinstance(path, str):
        raise SimharnessTypeError(
            f'`path` must be a str, got {type(path).__name__} {path!r}',
            expected=str,
            actual=type(path),
        )
    if not path:
        raise SimharnessValueError(
            f'`path` must be a non-empty string, cannot {what} models without an output path.'
        )


def _bytes_variable(data: bytes) -> tf.Variable:
    return tf.Variable(data, trainable=False, dtype=tf.string)


def _variable_bytes(v: tf.Variable) -> bytes:
    return v.read_value().numpy()


def _type_variable(t: T.Type) -> tf.Variable:
    return _bytes_variable(serialization_utils.pack_type_spec(t))


def _spec_of(value: TensorLeaf) -> tf.TensorSpec:
    return tf.TensorSpec.from_tensor(tf.convert_to_tensor(value))


def _to_tf_structure(t: T.Type, container: Optional[type] = None) -> SpecStructure:
    """TF specs in the shape of `t` (named structs: OrderedDicts; unnamed: tuples).

    `container` (BatchOutput, tuple) replaces the outermost struct's container.
    """
    specs = element_spec_for(t)
    if container is None or not isinstance(t, T.StructType):
        return specs
    values = list(specs.values()) if isinstance(specs, collections.abc.Mapping) else list(specs)
    if T.is_namedtuple_class(container):
        return container(*values)
    return container(values)


def _deserialize_type_spec(
    type_variable: tf.Variable, container: Optional[type] = None
) -> SpecStructure:
    t, _ = serialization_utils.unpack_type_spec_from(_variable_bytes(type_variable))
    return _to_tf_structure(t, container)


def _make_concrete_flat_output_fn(
    fn: Callable[..., TensorStructure], *args: SpecStructure, **kwargs: SpecStructure
) -> tuple[tf.types.experimental.ConcreteFunction, T.Type]:
    """A concrete function of `fn` whose output is flattened, and the type of the structured output.

    SavedModels hold flat outputs (no Python classes such as `BatchOutput`);
    the structure is packed again on load.
    """
    concrete_fn = tf.function(fn).get_concrete_function(*args, **kwargs)
    result_type = T.from_tf_structure(
        tf.nest.map_structure(_spec_of_output, concrete_fn.structured_outputs)
    )

    def flattened_output(*args: TensorStructure, **kwargs: TensorStructure) -> list:
        return tf.nest.flatten(fn(*args, **kwargs))

    return tf.function(flattened_output).get_concrete_function(*args, **kwargs), result_type


def _spec_of_output(x: Optional[tf.Tensor]) -> tf.TensorSpec:
    if x is None:
        raise SimharnessValueError(
            'a model function returned None in its output; a saved '
            'model needs tensors (every field of BatchOutput set)'
        )
    return tf.TensorSpec(x.shape, x.dtype)


def _unflatten_fn(
    fn: tf.types.experimental.ConcreteFunction,
    type_variable: tf.Variable,
    container: Optional[type] = None,
) -> tf.types.experimental.PolymorphicFunction:
    """A `tf.function` that calls the loaded flat `fn` and packs its result again."""
    nested_specs = _deserialize_type_spec(type_variable, container)

    def structured_output_fn(*args: TensorStructure, **kwargs: TensorStructure) -> TensorStructure:
        return tf.nest.pack_sequence_as(nested_specs, tf.nest.flatten(fn(*args, **kwargs)))

    return tf.function(structured_output_fn)


class _LoadedSavedModel(variable.VariableModel):
    """A `VariableModel` over a loaded SavedModel (what `load` returns)."""

    def __init__(self, loaded_module: _SavedVariableModel):
        self._loaded_module = loaded_module
        self._trainable_variables = list(loaded_module.tff_trainable_variables)
        self._non_trainable_variables = list(loaded_module.tff_non_trainable_variables)
        self._local_variables = list(loaded_module.tff_local_variables)
        self._forward_pass_training = _unflatten_fn(
            loaded_module.flat_forward_pass_training,
            loaded_module.forward_pass_training_type_spec,
            variable.BatchOutput,
        )
        self._forward_pass_inference = _unflatten_fn(
            loaded_module.flat_forward_pass_inference,
            loaded_module.forward_pass_inference_type_spec,
            variable.BatchOutput,
        )
        self._predict_on_batch_training = _unflatten_fn(
            loaded_module.predict_on_batch_training,
            loaded_module.predict_on_batch_training_type_spec,
            tuple,
        )
        self._predict_on_batch_inference = _unflatten_fn(
            loaded_module.predict_on_batch_inference,
            loaded_module.predict_on_batch_inference_type_spec,
            tuple,
        )
        # Saved from a model's input_spec: a mapping or a sequence of specs.
        self._input_spec = cast(
            InputSpec, _deserialize_type_spec(loaded_module.serialized_input_spec)
        )
        self._report_local_unfinalized_metrics = loaded_module.report_local_unfinalized_metrics
        self._serialized_metric_finalizers = loaded_module.serialized_metric_finalizers
        self._reset_metrics = getattr(loaded_module, 'reset_metrics', None)

    @property
    def input_spec(self) -> InputSpec:
        return self._input_spec

    @tf.function
    def forward_pass(
        self, batch_input: TensorStructure, training: bool = True
    ) -> variable.BatchOutput:
        if training:
            return self._forward_pass_training(batch_input)
        return self._forward_pass_inference(batch_input)

    @tf.function
    def predict_on_batch(self, x: TensorStructure, training: bool = True) -> TensorStructure:
        if training:
            return self._predict_on_batch_training(x)
        return self._predict_on_batch_inference(x)

    @property
    def trainable_variables(self) -> list:
        return self._trainable_variables

    @property
    def non_trainable_variables(self) -> list:
        return self._non_trainable_variables

    @property
    def local_variables(self) -> list:
        return self._local_variables

    @tf.function
    def report_local_unfinalized_metrics(self) -> collections.OrderedDict[str, TensorStructure]:
        return self._report_local_unfinalized_metrics()

    def metric_finalizers(self) -> collections.OrderedDict[str, Finalizer]:
        """The saved finalizers, as computations (``tff.tf_computation`` s)."""
        out: collections.OrderedDict[str, Finalizer] = collections.OrderedDict()
        for name in sorted(self._serialized_metric_finalizers):
            block, _ = serialization_utils.unpack_codec_value_from(
                _variable_bytes(self._serialized_metric_finalizers[name])
            )
            out[name] = ConcreteComputation(block, name)
        return out

    def reset_metrics(self) -> None:
        if self._reset_metrics is None:
            raise NotImplementedError(
                "The `reset_metrics` method isn't implemented for your custom "
                '`tff.learning.models.VariableModel`. Please implement it before using this '
                "method. You can leave this method unimplemented if you won't use this method."
            )
        self._reset_metrics()

    def save_module(self, path: str) -> None:
        """Writes the module this model was loaded from to `path` (what `save` does)."""
        _save_tensorflow_module(self._loaded_module, path)


def _save_tensorflow_module(
    tf_module: Union[tf.Module, _SavedVariableModel, _SavedFunctionalModel], path: str
) -> None:
    tf.saved_model.save(tf_module, export_dir=path, signatures=tf_module.predict_on_batch_inference)


def _concrete(fn: Callable[[], TensorStructure]) -> tf.types.experimental.ConcreteFunction:
    """`fn` (a `tf.function`, or a plain method: wrapped) as a concrete function of no argument."""
    traced: tf.types.experimental.PolymorphicFunction = (
        fn if hasattr(fn, 'get_concrete_function') else tf.function(fn)
    )
    return traced.get_concrete_function()


def _finalizer_block(finalizer: Finalizer, metric_type: T.Type) -> ComputationBuildingBlock:
    if isinstance(finalizer, Computation):
        return finalizer.to_building_block(metric_type)
    return tf_computation(finalizer, metric_type).to_building_block()


def save(
    model: variable.VariableModel, path: str, input_type: Optional[SpecStructure] = None
) -> None:
    """Writes `model` as a TensorFlow SavedModel to `path`.

    The SavedModel's default serving signature is ``predict_on_batch`` for
    inference. `load` gives back a `VariableModel` of the same behaviour (not
    the same Python class); its `metric_finalizers` are computations.

    Args:
        model: the `VariableModel`.
        path: the directory to write.
        input_type: the (structure of) `tf.TensorSpec` of ``predict_on_batch``'s
            input; default ``model.input_spec['x']`` for a mapping input spec,
            else ``model.input_spec[0]``.

    Raises:
        SimharnessTypeError: `model` is not a `VariableModel`, or `path` not a str.
        SimharnessValueError: `path` is empty.
    """
    if not isinstance(model, variable.VariableModel):
        raise SimharnessTypeError(
            f'`model` must be a tff.learning.models.VariableModel, got {type(model).__name__}',
            expected=variable.VariableModel,
            actual=type(model),
        )
    _check_path(path, 'serialize')
    if isinstance(model, _LoadedSavedModel):
        # A loaded model saves the module it was loaded from.
        model.save_module(path)
        return

    m = tf.Module()
    # ``tff_``: `tf.Module` reserves ``trainable_variables``.
    m.tff_trainable_variables = list(model.trainable_variables)
    m.tff_non_trainable_variables = list(model.non_trainable_variables)
    m.tff_local_variables = list(model.local_variables)
    if isinstance(model, keras_utils.KerasModel):  # read by the functions, though not weights
        m.tff_seed_variables = list(model.seed_variables)
    # `training` is a Python value: one concrete function per value.
    for training, suffix in ((True, 'training'), (False, 'inference')):
        fn, result_type = _make_concrete_flat_output_fn(
            functools.partial(model.forward_pass, training=training), model.input_spec
        )
        setattr(m, f'flat_forward_pass_{suffix}', fn)
        setattr(m, f'forward_pass_{suffix}_type_spec', _type_variable(result_type))
    if input_type is None:
        if isinstance(model.input_spec, collections.abc.Mapping):
            input_type = model.input_spec['x']
        else:
            input_type = model.input_spec[0]
    for training, suffix in ((True, 'training'), (False, 'inference')):
        fn, result_type = _make_concrete_flat_output_fn(
            functools.partial(model.predict_on_batch, training=training), input_type
        )
        setattr(m, f'predict_on_batch_{suffix}', fn)
        setattr(m, f'predict_on_batch_{suffix}_type_spec', _type_variable(result_type))
    m.report_local_unfinalized_metrics = _concrete(model.report_local_unfinalized_metrics)

    unfinalized = model.report_local_unfinalized_metrics()
    m.serialized_metric_finalizers = {}
    for metric_name, finalizer in model.metric_finalizers().items():
        metric_type = T.from_tf_structure(tf.nest.map_structure(_spec_of, unfinalized[metric_name]))
        m.serialized_metric_finalizers[metric_name] = _bytes_variable(
            serialization_utils.pack_codec_value(_finalizer_block(finalizer, metric_type))
        )
    m.serialized_input_spec = _type_variable(T.from_tf_structure(model.input_spec))
    try:
        m.reset_metrics = _concrete(model.reset_metrics)
    except NotImplementedError:
        m.reset_metrics = None
    _save_tensorflow_module(m, path)


def load(path: str) -> variable.VariableModel:
    """The `VariableModel` `save` wrote to `path`.

    Raises:
        SimharnessTypeError: `path` is not a str.
        SimharnessValueError: `path` is empty.
    """
    _check_path(path, 'deserialize')
    return _LoadedSavedModel(tf.saved_model.load(path))


class _WeightsModule(tf.Module):
    """A `tf.Module` holding a structure of weights as variables; calling it reads them."""

    def __init__(self, weights: TensorStructure):
        super().__init__()
        self._weights = tf.nest.map_structure(lambda x: tf.Variable(initial_value=x), weights)

    @tf.function(input_signature=())
    def __call__(self) -> TensorStructure:
        return tf.nest.map_structure(lambda x: x.read_value(), self._weights)


def save_functional_model(functional_model: functional.FunctionalModel, path: str) -> None:
    """Writes a `FunctionalModel` (initial weights, ``predict_on_batch``, ``loss``) as a SavedModel.

    Raises:
        SimharnessTypeError: `functional_model` is not a `FunctionalModel`, or
            `path` not a str.
        SimharnessValueError: `path` is empty.
    """
    if not isinstance(functional_model, functional.FunctionalModel):
        raise SimharnessTypeError(
            '`functional_model` must be a tff.learning.models.FunctionalModel, got '
            f'{type(functional_model).__name__}',
            expected=functional.FunctionalModel,
            actual=type(functional_model),
        )
    _check_path(path, 'serialize')
    m = _WeightsModule(functional_model.initial_weights)
    weights_specs = tf.nest.map_structure(
        tf.TensorSpec.from_tensor, m.__call__.get_concrete_function().structured_outputs
    )
    x_spec, y_spec = functional_model.input_spec

    def make_concrete_flat_predict_on_batch(
        training: bool,
    ) -> tuple[tf.types.experimental.ConcreteFunction, T.Type]:
        # `training` is curried into the graph: not a parameter of the concrete function.
        structured = tf.function(functional_model.predict_on_batch).get_concrete_function(
            weights_specs, x_spec, training=training
        )
        result_type = T.from_tf_structure(
            tf.nest.map_structure(tf.TensorSpec.from_tensor, structured.structured_outputs)
        )

        def flat_predict_on_batch(model_weights, x, training):
            return tf.nest.flatten(functional_model.predict_on_batch(model_weights, x, training))

        flat = tf.function(flat_predict_on_batch).get_concrete_function(
            weights_specs, x_spec, training=training
        )
        return flat, result_type

    for training, suffix in ((True, 'training'), (False, 'inference')):
        with tf.Graph().as_default():
            fn, result_type = make_concrete_flat_predict_on_batch(training)
        setattr(m, f'predict_on_batch_{suffix}', fn)
        setattr(m, f'predict_on_batch_{suffix}_type_spec', _type_variable(result_type))

    output_specs = _deserialize_type_spec(m.predict_on_batch_training_type_spec, tuple)

    def make_concrete_flat_loss() -> tuple[tf.types.experimental.ConcreteFunction, T.Type]:
        structured = tf.function(functional_model.loss).get_concrete_function(
            output_specs, y_spec, sample_weight=None
        )
        result_type = T.from_tf_structure(
            tf.nest.map_structure(tf.TensorSpec.from_tensor, structured.structured_outputs)
        )

        def flat_loss(output, label, sample_weight=None):
            return tf.nest.flatten(functional_model.loss(output, label, sample_weight))

        flat = tf.function(flat_loss).get_concrete_function(
            output_specs, y_spec, sample_weight=None
        )
        return flat, result_type

    with tf.Graph().as_default():
        loss_fn, loss_type = make_concrete_flat_loss()
    m.loss = loss_fn
    m.loss_type_spec = _type_variable(loss_type)
    m.serialized_input_spec = _type_variable(T.from_tf_structure(functional_model.input_spec))
    _save_tensorflow_module(m, path)


class _LoadedFunctionalModel(functional.FunctionalModel):
    """A `FunctionalModel` over a loaded SavedModel (what `load_functional_model` returns)."""

    def __init__(self, loaded_module: _SavedFunctionalModel):
        self._loaded_module = loaded_module
        input_spec = tf.nest.map_structure(
            lambda t: tf.TensorSpec(dtype=t.dtype, shape=t.shape),
            _deserialize_type_spec(loaded_module.serialized_input_spec, tuple),
        )
        initial_weights = tf.nest.map_structure(lambda x: x.numpy(), loaded_module())

        def unflatten_predict_on_batch(
            flat_fn: tf.types.experimental.ConcreteFunction,
            type_variable: tf.Variable,
            training: bool,
        ) -> Callable[[TensorStructure, TensorStructure], TensorStructure]:
            result_specs = _deserialize_type_spec(type_variable, tuple)

            def predict_on_batch(
                model_weights: TensorStructure, x: TensorStructure
            ) -> TensorStructure:
                result = flat_fn(model_weights=model_weights, x=x, training=training)
                if tf.is_tensor(result):
                    return result
                return tf.nest.pack_sequence_as(result_specs, tf.nest.flatten(result))

            return predict_on_batch

        predict_training = unflatten_predict_on_batch(
            loaded_module.predict_on_batch_training,
            loaded_module.predict_on_batch_training_type_spec,
            True,
        )
        predict_inference = unflatten_predict_on_batch(
            loaded_module.predict_on_batch_inference,
            loaded_module.predict_on_batch_inference_type_spec,
            False,
        )
        loss_specs = _deserialize_type_spec(loaded_module.loss_type_spec)

        @tf.function
        def predict_on_batch_fn(
            model_weights: TensorStructure, x: TensorStructure, training: bool = True
        ) -> TensorStructure:
            if training:
                return predict_training(model_weights, x)
            return predict_inference(model_weights, x)

        def loss_fn(
            output: TensorStructure,
            label: TensorStructure,
            sample_weight: Optional[TensorStructure] = None,
        ) -> TensorStructure:
            result = loaded_module.loss(output, label, sample_weight)
            if tf.is_tensor(result):
                return result
            return tf.nest.pack_sequence_as(loss_specs, tf.nest.flatten(result))

        super().__init__(
            initial_weights=initial_weights,
            predict_on_batch_fn=predict_on_batch_fn,
            loss_fn=loss_fn,
            input_spec=input_spec,
        )


def load_functional_model(path: str) -> functional.FunctionalModel:
    """The `FunctionalModel` `save_functional_model` wrote to `path`.

    Raises:
        SimharnessTypeError: `path` is not a str.
        SimharnessValueError: `path` is empty.
    """
    _check_path(path, 'deserialize')
    return _LoadedFunctionalModel(tf.saved_model.load(path))
