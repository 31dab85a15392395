"""Names for the values that learning code hands around, so that signatures say what they carry.

Inside a `federated_computation` a value is a `tracing.Value` (a typed reference to
a part of the computation being traced: ``value.name`` and ``value[i]`` select its
elements); inside a `tf_computation` or a `tf.function` a value is a tensor, or a
nested structure of tensors that the computation's parameter type rebuilt with its
Python containers. These aliases name the second kind.

This module imports neither TensorFlow nor Keras (only the modules that do TF work
may: tests/unit/test_import_contracts.py), so a tensor, a variable and a spec are
Protocols of what this code reads of them; `tf.Tensor`, `tf.Variable`, Keras'
variables, `tf.TensorSpec` and numpy arrays all are ones. (TensorFlow ships no type
information: mypy takes its values for any of these.)
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol, Sequence, Union

import numpy as np


class Tensor(Protocol):
    """A tensor (eager or symbolic), a variable, or a numpy array: a shape and a dtype."""

    @property
    def shape(self) -> object: ...

    @property
    def dtype(self) -> object: ...


class Variable(Tensor, Protocol):
    """A model's variable: a `tf.Variable`, or a Keras 3 variable (`keras.Variable`)."""

    @property
    def name(self) -> str: ...


#: A `tf.TensorSpec` (the shape and dtype of a tensor to come).
TensorSpec = Tensor

#: One leaf of a structure: a tensor, a variable, or a numpy array or scalar (values
#: read back out of the graph).
TensorLeaf = Union[Tensor, np.ndarray, np.generic]

#: A model's variable.
ModelVariable = Variable

#: A nested structure of tensors (TF's *nest*: what `tf.nest` walks, what a
#: `tf_computation` takes and returns): a leaf, or a list, tuple, namedtuple
#: (`ModelWeights`), dict or `OrderedDict` of structures. Annotates the values that
#: a function passes on whole (to `tf.nest`, to another computation); one that takes
#: a structure apart is annotated with its precise container instead.
TensorStructure = Union[
    TensorLeaf, int, float, bool, None, Sequence['TensorStructure'], Mapping[str, 'TensorStructure']
]

#: A batch of a client's dataset: a mapping (``x``, ``y``, ...) or a tuple ``(x, y)``
#: of structures of tensors.
Batch = Union[Mapping[str, TensorStructure], Sequence[TensorStructure]]

#: A structure of `tf.TensorSpec` (the specs of a structure of tensors), as
#: `Optimizer.initialize` and a model's ``input_spec`` take them.
SpecStructure = Union[TensorSpec, Sequence['SpecStructure'], Mapping[str, 'SpecStructure']]

#: A model's ``input_spec``: the specs of a batch, a mapping (``x``, ``y``) or a pair.
InputSpec = Union[Mapping[str, SpecStructure], Sequence[SpecStructure]]

#: A finalizer: unfinalized values (a structure of tensors) -> the metric's value.
Finalizer = Callable[[TensorStructure], TensorStructure]

#: A functional model's finalizer: the whole metrics state -> the metrics' values by name.
FunctionalFinalizer = Callable[[TensorStructure], Mapping[str, TensorStructure]]

#: Metric finalizers as the metric aggregators take them: a `VariableModel`'s
#: ``metric_finalizers()`` (metric name -> the finalizer of that metric's unfinalized
#: values), or a `FunctionalModel`'s ``finalize_metrics`` (the whole metrics state ->
#: the metrics' values).
MetricFinalizers = Union[Mapping[str, Finalizer], FunctionalFinalizer]


#: A field of the learning templates' named tuples (`ClientResult`,
#: `LearningAlgorithmState`, `LearningProcessOutput`, ...). A container holds other
#: things at each stage: `tracing.Value` s while a federated computation is traced,
#: structures of tensors in a `tf_computation`, numpy values in a computation's result,
#: and `T.Type` s as the Python container of a struct type. Hence `object`: code that
#: reads a field knows its stage and narrows it.
TemplateField = object

__all__ = [
    'Batch',
    'InputSpec',
    'Finalizer',
    'Tensor',
    'TensorSpec',
    'Variable',
    'ModelVariable',
    'FunctionalFinalizer',
    'MetricFinalizers',
    'SpecStructure',
    'TemplateField',
    'TensorLeaf',
    'TensorStructure',
]
