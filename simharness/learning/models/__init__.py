"""Models (``tff.learning.models``) and the built-in architectures.

TFF's model API, with TFF's names and shapes:

* `VariableModel` (abstract) and `BatchOutput`: a model of `tf.Variable` s,
  built by ``model_fn`` inside each computation that uses it.
* `from_keras_model(keras_model, loss, input_spec, loss_weights=None,
  metrics=None)`: a Keras 3 model as a `VariableModel` (metrics ``loss``,
  ``num_examples``, ``num_batches`` added).
* `ModelWeights` (``trainable``, ``non_trainable``; `from_model`,
  `assign_weights_to`, `convert_variables_to_arrays`) and
  `weights_type_from_model`.
* `FunctionalModel`, `functional_model_from_keras`, `model_from_functional`:
  models as functions of their weights.
* `save` / `load`, `save_functional_model` / `load_functional_model`: models
  as TensorFlow SavedModels (module `serialization`).
* `ReconstructionModel`, `ReconstructionDatasetSplitFn`: models of global and
  local variables for federated reconstruction.

Beside them (module `specs`), the built-in architectures of the benchmarks and
configs: `ModelSpec`, `get_model`, `init_weights`, `forward`, `loss`,
`accuracy`, `numpy_evaluate`, `reference_mlp_spec`, `reference_mlp_init`.
"""

from simharness.learning.models.functional import (
    FunctionalModel,
    functional_model_from_keras,
    model_from_functional,
)
from simharness.learning.models.keras_utils import from_keras_model
from simharness.learning.models.model_weights import ModelWeights, weights_type_from_model
from simharness.learning.models.reconstruction_model import (
    ReconstructionDatasetSplitFn,
    ReconstructionModel,
)
from simharness.learning.models.serialization import (
    load,
    load_functional_model,
    save,
    save_functional_model,
)
from simharness.learning.models.specs import (
    MODEL_NAMES,
    ModelSpec,
    accuracy,
    forward,
    get_model,
    init_weights,
    loss,
    numpy_evaluate,
    reference_mlp_init,
    reference_mlp_spec,
)
from simharness.learning.models.variable import BatchOutput, VariableModel

__all__ = [
    'BatchOutput',
    'FunctionalModel',
    'ModelWeights',
    'ReconstructionDatasetSplitFn',
    'ReconstructionModel',
    'VariableModel',
    'from_keras_model',
    'functional_model_from_keras',
    'load',
    'load_functional_model',
    'model_from_functional',
    'save',
    'save_functional_model',
    'weights_type_from_model',
    # the built-in architectures (module `specs`)
    'MODEL_NAMES',
    'ModelSpec',
    'accuracy',
    'forward',
    'get_model',
    'init_weights',
    'loss',
    'numpy_evaluate',
    'reference_mlp_init',
    'reference_mlp_spec',
]
