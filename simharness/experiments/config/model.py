"""``[model]``: the model, one variant class per ``name`` (`ModelConfig`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, Optional, Tuple

from simharness.errors import ConfigError
from simharness.experiments.config.base import (
    _int,
    _ints,
    _opt,
    _own_keys,
    _require,
    _Table,
    _Union,
)


class ModelConfig(_Table, metaclass=_Union):
    """``[model]``: the architecture (see `simharness.learning.models`), one class per ``name``.

    ``ModelConfig(name=..., **options)`` builds `MlpModel` (default),
    `LogregModel`, `CnnModel` or `KerasModel`. The input shape and number of
    classes come from the data. Initial weights are ``init_weights(model,
    training.seed)``; for the reference dataset they are the benchmark's
    (``init_weights(model, 1)``, which is ``reference_mlp_init()`` for the
    default mlp).
    """

    TABLE, TAG, DEFAULT = 'model', 'name', 'mlp'
    VARIANTS: ClassVar[Dict[str, type]] = {}
    name: str  # the tag: a field of each variant

    def options(self) -> Dict[str, Any]:
        """The keyword options of `simharness.learning.get_model` for this model."""
        return {k: getattr(self, k) for k in _own_keys(type(self)) if k != self.TAG}


@dataclasses.dataclass(frozen=True)
class LogregModel(ModelConfig, tag='logreg'):
    """Logistic regression (no options)."""


@dataclasses.dataclass(frozen=True)
class MlpModel(ModelConfig, tag='mlp'):
    """A multi-layer perceptron.

    Attributes:
        hidden_sizes: widths of the hidden layers.
    """

    hidden_sizes: Tuple[int, ...] = _opt((256, 256), _ints())


@dataclasses.dataclass(frozen=True)
class CnnModel(ModelConfig, tag='cnn'):
    """Two conv + max-pool layers and a dense layer (image data: [H, W, C] examples).

    Attributes:
        conv_filters: filters of the two conv layers.
        kernel_size: conv kernel side.
        pool_size: max-pool side.
    """

    conv_filters: Tuple[int, ...] = _opt((16, 32), _ints(2))
    kernel_size: int = _opt(3, _int(1))
    pool_size: int = _opt(2, _int(1))


@dataclasses.dataclass(frozen=True)
class KerasModel(ModelConfig, tag='keras'):
    """A Keras model.

    Attributes:
        keras: ``"package.module:function"``, a function ``(input_shape,
            num_classes) -> keras.Model`` (its compiled loss, else sparse
            categorical cross-entropy from logits; metric: accuracy); initial
            weights: ``keras.utils.set_random_seed(seed)`` then a fresh build.
            Required.
    """

    keras: Optional[str] = None

    def _validate(self) -> None:
        _require(
            self,
            'keras',
            'model.name = "keras" (a "package.module:function" building the keras.Model)',
        )
        if (
            not isinstance(self.keras, str)
            or self.keras.count(':') != 1
            or not all(self.keras.split(':'))
        ):
            raise ConfigError(
                f'model.keras must look like "package.module:function", got {self.keras!r}',
                key='model.keras',
                value=self.keras,
            )
