"""Optimizers (``tff.learning.optimizers``): `Optimizer` and its ``build_*`` family.

Every optimizer follows TFF's contract (`optimizer.Optimizer`)::

    state = opt.initialize(specs)                         # specs: tf.TensorSpec structure
    state, weights = opt.next(state, weights, gradients)  # TF ops, no variables
    opt.get_hparams(state) / opt.set_hparams(state, hparams)

with TFF's state structures (``OrderedDict(learning_rate=..., ...)``) and math:
`build_sgdm`, `build_adam`, `build_adamw`, `build_yogi`, `build_adagrad`,
`build_rmsprop`, `build_adafactor`, and `schedule_learning_rate`.
"""

from simharness.learning.optimizers.adafactor import build_adafactor
from simharness.learning.optimizers.adagrad import build_adagrad
from simharness.learning.optimizers.adam import build_adam
from simharness.learning.optimizers.adamw import build_adamw
from simharness.learning.optimizers.keras_optimizer import (
    KerasOptimizer,
    build_or_verify_tff_optimizer,
)
from simharness.learning.optimizers.optimizer import (
    LEARNING_RATE_KEY,
    Optimizer,
    check_weights_gradients_match,
    handle_indexed_slices_gradients,
)
from simharness.learning.optimizers.rmsprop import build_rmsprop
from simharness.learning.optimizers.scheduling import schedule_learning_rate
from simharness.learning.optimizers.sgdm import build_sgdm
from simharness.learning.optimizers.yogi import build_yogi

__all__ = [
    'LEARNING_RATE_KEY',
    'KerasOptimizer',
    'Optimizer',
    'build_adafactor',
    'build_adagrad',
    'build_adam',
    'build_adamw',
    'build_or_verify_tff_optimizer',
    'build_rmsprop',
    'build_sgdm',
    'build_yogi',
    'check_weights_gradients_match',
    'handle_indexed_slices_gradients',
    'schedule_learning_rate',
]
