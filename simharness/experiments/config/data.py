"""``[data]``: the federated data set, one variant class per ``dataset`` (`DataConfig`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict, Optional

from simharness.errors import ConfigError
from simharness.experiments.config.base import (
    _check_bool,
    _check_str,
    _choice,
    HF_PARTITIONS,
    _int,
    _num,
    _opt,
    PARTITIONS,
    REFERENCE_NUM_CLIENTS,
    _require,
    _Table,
    _Union,
)


class DataConfig(_Table, metaclass=_Union):
    """``[data]``: the federated data set, one variant class per ``dataset``.

    ``DataConfig(dataset=..., **options)`` builds the variant:
    `SyntheticData`, `DigitsData`, `FilesData`, `ReferenceData`,
    `EmnistData`, `Cifar100Data`, `ShakespeareData`, `StackOverflowData`,
    `HfData`. ``dataset`` is the tag (default ``'synthetic'``).
    """

    TABLE, TAG, DEFAULT = 'data', 'dataset', 'synthetic'
    VARIANTS: ClassVar[Dict[str, type]] = {}
    dataset: str  # the tag: a field of each variant

    @property
    def known_num_clients(self) -> Optional[int]:
        """The number of clients if the config tells it (not for 'files')."""
        return getattr(self, 'num_clients', None)


@dataclasses.dataclass(frozen=True)
class SyntheticData(DataConfig, tag='synthetic'):
    """Synthetic(alpha, beta) of FedProx.

    Attributes:
        num_clients: number of clients.
        alpha: std of the per-client model mean.
        beta: std of the per-client input mean.
        samples_per_client: samples per client.
        dim: input dimension.
        num_classes: number of classes.
        iid: the FedProx "Synthetic IID" variant.
        seed: data seed.
    """

    num_clients: int = _opt(20, _int(1))
    alpha: float = _opt(1.0, _num(0.0))
    beta: float = _opt(1.0, _num(0.0))
    samples_per_client: int = _opt(50, _int(1))
    dim: int = _opt(60, _int(1))
    num_classes: int = _opt(10, _int(2))
    iid: bool = _opt(False, _check_bool)
    seed: int = _opt(0, _int(0))


@dataclasses.dataclass(frozen=True)
class DigitsData(DataConfig, tag='digits'):
    """scikit-learn digits split over clients, with a held-out test set.

    Attributes:
        num_clients: number of clients.
        partition: ``'dirichlet'`` (label skew) or ``'iid'``.
        dirichlet_alpha: Dirichlet concentration (the 'dirichlet' partition only).
        test_fraction: held-out test fraction.
        min_size: smallest client.
        seed: data seed.
    """

    num_clients: int = _opt(20, _int(1))
    partition: str = _opt('dirichlet', _choice(PARTITIONS))
    dirichlet_alpha: float = _opt(0.5, _num(0.0, inclusive=False))
    test_fraction: float = _opt(0.2, _num(0.0, below=1.0))
    min_size: int = _opt(5, _int(1))
    seed: int = _opt(0, _int(0))


@dataclasses.dataclass(frozen=True)
class FilesData(DataConfig, tag='files'):
    """A directory of ``<client_id>.npz`` files, or one .npz / .csv file with a client id column.

    Attributes:
        num_classes: optional (default: largest label + 1).
        path: the directory or file (required; relative paths are relative to
            the config file when loaded with `load_config`).
        x_key: feature array / column name.
        y_key: label array / column name.
        client_id_key: client id array / column of a single file.
    """

    num_classes: Optional[int] = _opt(None, _int(2))
    path: Optional[str] = _opt(None, _check_str)
    x_key: str = _opt('x', _check_str)
    y_key: str = _opt('y', _check_str)
    client_id_key: str = _opt('client_id', _check_str)

    def _validate(self) -> None:
        _require(
            self,
            'path',
            "data.dataset = 'files' (a directory of <client_id>.npz files, "
            'or one .npz / .csv file)',
        )
        if len({self.x_key, self.y_key, self.client_id_key}) != 3:
            raise ConfigError(
                f'data.x_key, data.y_key and data.client_id_key must differ, got '
                f'{self.x_key!r}, {self.y_key!r}, {self.client_id_key!r}',
                key='data.y_key',
                value=self.y_key,
            )

    @property
    def known_num_clients(self) -> Optional[int]:
        return None


@dataclasses.dataclass(frozen=True)
class ReferenceData(DataConfig, tag='reference'):
    """Exactly the 1000-client Synthetic(1, 1) of benchmarks/fedavg-synthetic-mlp.md (no options)."""

    @property
    def known_num_clients(self) -> Optional[int]:
        return REFERENCE_NUM_CLIENTS


# TFF's benchmark data sets: ``cache_dir`` is the directory holding TFF's published SQLite
# or HDF5 file (default ``~/.tff``, TFF's; a missing file is downloaded there, as TFF's
# loaders do: `simharness.data.benchmarks`); ``max_clients`` keeps the first N clients
# (sorted ids) of the train split.


@dataclasses.dataclass(frozen=True)
class EmnistData(DataConfig, tag='emnist'):
    """TFF's federated EMNIST; ``only_digits``: the 10-class digits-only variant."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    only_digits: bool = _opt(False, _check_bool)
    max_clients: Optional[int] = _opt(None, _int(1))


@dataclasses.dataclass(frozen=True)
class Cifar100Data(DataConfig, tag='cifar100'):
    """TFF's federated CIFAR-100."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    max_clients: Optional[int] = _opt(None, _int(1))


@dataclasses.dataclass(frozen=True)
class ShakespeareData(DataConfig, tag='shakespeare'):
    """TFF's Shakespeare (next-character prediction); ``sequence_length`` tokens per example."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    max_clients: Optional[int] = _opt(None, _int(1))
    sequence_length: int = _opt(80, _int(1))


@dataclasses.dataclass(frozen=True)
class StackOverflowData(DataConfig, tag='stackoverflow'):
    """TFF's Stack Overflow (next-word prediction); ``sequence_length`` tokens per example,
    ``vocab_size`` most frequent words kept."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    max_clients: Optional[int] = _opt(None, _int(1))
    sequence_length: int = _opt(20, _int(1))
    vocab_size: int = _opt(10000, _int(1))


@dataclasses.dataclass(frozen=True)
class HfData(DataConfig, tag='hf'):
    """A Hugging Face data set (`simharness.data.benchmarks.load_hf_dataset`).

    Attributes:
        num_clients, dirichlet_alpha, min_size, seed: of the 'dirichlet' partition.
        num_classes: optional (default: largest label + 1).
        partition: ``'natural'`` (one client per client_id_key value) or ``'dirichlet'``.
        path: a directory written by save_to_disk, or a data set name in the
            local Hugging Face cache (required).
        x_key, y_key: feature and label columns.
        client_id_key: the natural client id column (required for 'natural').
        cache_dir: the Hugging Face cache directory (optional).
        hf_split: the split of a saved DatasetDict (e.g. 'train').
    """

    num_clients: int = _opt(20, _int(1))
    num_classes: Optional[int] = _opt(None, _int(2))
    partition: str = _opt('natural', _choice(HF_PARTITIONS))
    dirichlet_alpha: float = _opt(0.5, _num(0.0, inclusive=False))
    min_size: int = _opt(1, _int(1))
    seed: int = _opt(0, _int(0))
    path: Optional[str] = _opt(None, _check_str)
    x_key: str = _opt('x', _check_str)
    y_key: str = _opt('y', _check_str)
    client_id_key: Optional[str] = _opt(None, _check_str)
    cache_dir: Optional[str] = _opt(None, _check_str)
    hf_split: Optional[str] = _opt(None, _check_str)

    def _validate(self) -> None:
        _require(
            self,
            'path',
            "data.dataset = 'hf' (a save_to_disk directory or a locally cached data set name)",
        )
        if self.partition == 'natural':
            _require(
                self,
                'client_id_key',
                "data.partition = 'natural' (the column naming each example's client)",
            )

    @property
    def known_num_clients(self) -> Optional[int]:
        return None if self.partition == 'natural' else self.num_clients
