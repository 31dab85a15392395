"""The variable-based model of ``tff.learning.models``: `VariableModel`, `BatchOutput`.

A `VariableModel` owns `tf.Variable` s: weights (trainable and not) that the
server sends, and local variables (metric sums) that stay on the client.
TFF builds it inside a `tf_computation` (``model_fn()`` is called while the
computation is traced), assigns the server's weights to its variables, runs
`forward_pass` on batches and reports its metrics' unfinalized values as
tensors; `metric_finalizers` turn the summed values into metrics at the server.
"""

from __future__ import annotations

import abc
import collections
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import tensorflow as tf

    from simharness.learning._typing import Batch, Finalizer, InputSpec, TensorStructure

#: Keys of the model input and the label when `input_spec` is a mapping.
MODEL_ARG_NAME = 'x'
MODEL_LABEL_NAME = 'y'

BatchOutput = collections.namedtuple(
    'BatchOutput', ['loss', 'predictions', 'num_examples'], defaults=[None, None, None]
)
BatchOutput.__doc__ = """The output of `VariableModel.forward_pass` (every field may be None).

Attributes:
  loss: the scalar mean loss over the batch's examples.
  predictions: the predictions; first dimension the batch.
  num_examples: the number of examples in the batch.
"""


class VariableModel(metaclass=abc.ABCMeta):
    """A model of `tf.Variable` s for federated learning (``tff.learning.models.VariableModel``).

    Every method is traced into a TF graph (usually once), so the object is
    stateless from Python's point of view: all state lives in its variables,
    created in ``__init__``. Users of the model initialize the variables.
    """

    @property
    @abc.abstractmethod
    def trainable_variables(self) -> Sequence[tf.Variable]:
        """The trainable weights (`tf.Variable` s)."""

    @property
    @abc.abstractmethod
    def non_trainable_variables(self) -> Sequence[tf.Variable]:
        """The weights that are not trained (sent by the server all the same)."""

    @property
    @abc.abstractmethod
    def local_variables(self) -> Sequence[tf.Variable]:
        """Variables that stay on the client (metric accumulators)."""

    @property
    @abc.abstractmethod
    def input_spec(self) -> InputSpec:
        """The structure of `tf.TensorSpec` of `forward_pass`'s `batch_input` (batch first).

        A mapping has keys ``'x'`` (model input) and ``'y'`` (labels); otherwise
        element 0 is the input and element 1 the labels.
        """

    @abc.abstractmethod
    def forward_pass(self, batch_input: Batch, training: bool = True) -> BatchOutput:
        """Runs the model on a batch, updates the metrics, returns a `BatchOutput`.

        Args:
          batch_input: a structure matching `input_spec`.
          training: training mode (dropout, ...) as Keras' ``training``.
        """

    @abc.abstractmethod
    def predict_on_batch(
        self, batch_input: TensorStructure, training: bool = True
    ) -> TensorStructure:
        """The predictions for the model input (``input_spec``'s ``x``); no metric update."""

    @abc.abstractmethod
    def report_local_unfinalized_metrics(self) -> collections.OrderedDict[str, TensorStructure]:
        """Metric name -> its unfinalized values (tensors) since the last `reset_metrics`.

        For a Keras metric: the values of its variables. Summed over clients,
        they are the input of the finalizer of the same name.
        """

    @abc.abstractmethod
    def metric_finalizers(self) -> collections.OrderedDict[str, Finalizer]:
        """Metric name -> finalizer (unfinalized values -> the metric's value, TF ops)."""

    @abc.abstractmethod
    def reset_metrics(self) -> None:
        """Resets the metrics' variables to their initial values."""
