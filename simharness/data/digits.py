"""The scikit-learn digits data set (8x8 images, 10 classes), split over clients.

The data ship with simharness (``digits.csv.gz`` beside this module, 1,797 samples:
scikit-learn's copy of the test set of the UCI ML hand-written digits data set, E.
Alpaydin, 1998, https://archive.ics.uci.edu/ml/datasets/Optical+Recognition+of+Handwritten+Digits;
the file as scikit-learn 1.9 ships it, BSD-3-Clause), so nothing is downloaded and
scikit-learn is not needed (where it is installed, Keras imports it with TensorFlow: about
a second of every process' start). A seeded held-out test split is returned as plain
arrays for central evaluation; the rest is partitioned over clients either IID or with the
Dirichlet label-skew partition.
"""

from __future__ import annotations

import gzip
import math
import os

import numpy as np

from simharness.data.client_data import ArrayClientData
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.validation import check_int as _check_int

_PARTITIONS = ('dirichlet', 'iid')

#: The 1,797 digits, one per row: 64 pixel values in 0..16, then the label.
DIGITS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'digits.csv.gz')


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits: pixels scaled to [0, 1] (float32, shape [1797, 64], the values
    ``sklearn.datasets.load_digits().data / 16`` gives) and labels (int32, [1797])."""
    with gzip.open(DIGITS_FILE, 'rt') as f:
        rows = np.loadtxt(f, delimiter=',', dtype=np.float64)
    return (rows[:, :-1] / 16.0).astype(np.float32), rows[:, -1].astype(np.int32)


def iid_partition(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffles ``range(num_samples)`` and splits it into near-equal parts.

    Sizes differ by at most one (``np.array_split``); every index is used
    exactly once.

    Args:
        num_samples: number of samples to split.
        num_clients: number of parts.
        rng: the generator for the shuffle.

    Returns:
        One index array per client.
    """
    return np.array_split(rng.permutation(num_samples), num_clients)


def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    min_size: int = 1,
    max_attempts: int = 100,
) -> list[np.ndarray]:
    """The standard Dirichlet label-skew partition (as in NIID-Bench / FedMA).

    Per class c (in increasing label order): shuffle the indices of class
    c, draw proportions ``p ~ Dirichlet(alpha * ones(num_clients))``, set
    ``p_j = 0`` for clients that already hold ``>= N / num_clients``
    samples (keeps sizes balanced), renormalise, and cut the shuffled class
    indices at ``floor(cumsum(p) * n_c)``. If the smallest client has
    fewer than `min_size` samples, the whole draw is repeated (with the
    generator's next draws), at most `max_attempts` times. Finally each
    client's indices are shuffled so that classes are interleaved.

    Args:
        labels: integer labels ``[N]``.
        num_clients: number of clients.
        alpha: Dirichlet concentration (> 0); small means strong skew.
        rng: the generator for all draws.
        min_size: smallest allowed client size.
        max_attempts: how many full draws to try.

    Returns:
        One index array per client; together they cover ``range(N)``
        exactly once.

    Raises:
        SimharnessValueError: `min_size` not reached in `max_attempts`
            draws, or impossible (``num_clients * min_size > N``).
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    if num_clients * min_size > n:
        raise SimharnessValueError(
            f'cannot give {num_clients} clients at least {min_size} samples each: only {n} samples'
        )
    classes = np.unique(labels)
    smallest = 0
    for _ in range(max_attempts):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, np.int64)
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(num_clients, alpha))
            p = p * (sizes < n / num_clients)
            total = p.sum()
            p = p / total if total > 0 else np.full(num_clients, 1.0 / num_clients)
            cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            for j, chunk in enumerate(np.split(idx, cuts)):
                parts[j].append(chunk)
                sizes[j] += len(chunk)
        smallest = int(sizes.min())
        if smallest >= min_size:
            return [rng.permutation(np.concatenate(chunks)) for chunks in parts]
    raise SimharnessValueError(
        f'Dirichlet partition: no draw in {max_attempts} attempts gave every one '
        f'of {num_clients} clients at least min_size={min_size} samples (the '
        f'last draw had a client with {smallest}); use a larger alpha '
        f'(now {alpha}), a smaller min_size, fewer clients or more attempts'
    )


def load_digits_federated(
    num_clients: int = 20,
    partition: str = 'dirichlet',
    alpha: float = 0.5,
    test_fraction: float = 0.2,
    seed: int = 0,
    min_size: int = 5,
    as_images: bool = False,
    max_attempts: int = 100,
) -> tuple[ArrayClientData, tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's `load_digits`, split into clients and a central test set.

    Features are the 64 pixel intensities (0..16) divided by 16, as float32
    in [0, 1]; labels are int32 in [0, 10). One
    ``np.random.default_rng(seed)`` drives, in order: the test split (a
    permutation; the first ``ceil(test_fraction * N)`` samples are the test
    set, the rest keep their original relative order), then the partition
    (`iid_partition` or `dirichlet_partition`, see there).

    Args:
        num_clients: number of clients (>= 1).
        partition: ``'dirichlet'`` (label skew) or ``'iid'`` (seeded shuffle,
            sizes differing by at most one).
        alpha: Dirichlet concentration (> 0); only for ``'dirichlet'``.
        test_fraction: fraction held out for the test split, in [0, 1).
        seed: seed (>= 0).
        min_size: every client gets at least this many samples (both
            partitions; for ``'iid'`` this is only a check).
        as_images: give x as ``[n, 8, 8, 1]`` instead of ``[n, 64]``.
        max_attempts: Dirichlet redraws before giving up.

    Returns:
        ``(client_data, (x_test, y_test))``: an `ArrayClientData` with ids
        ``'0' .. str(num_clients-1)`` and arrays ``{'x', 'y'}``, and the
        test arrays.

    Raises:
        SimharnessTypeError: an argument of the wrong type.
        SimharnessValueError: a bad partition name, an argument out of range,
            or a partition that cannot satisfy `min_size`.
    """
    num_clients = _check_int('num_clients', num_clients, 1)
    seed = _check_int('seed', seed, 0)
    min_size = _check_int('min_size', min_size, 1)
    max_attempts = _check_int('max_attempts', max_attempts, 1)
    if partition not in _PARTITIONS:
        raise SimharnessValueError(
            f'unknown partition {partition!r}; allowed: {", ".join(_PARTITIONS)}'
        )
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.number)):
        raise SimharnessTypeError(
            f'alpha must be a real number, got {alpha!r}', expected=float, actual=type(alpha)
        )
    if not (math.isfinite(alpha) and alpha > 0):
        raise SimharnessValueError(f'alpha must be finite and > 0, got {alpha}')
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float, np.number)):
        raise SimharnessTypeError(
            f'test_fraction must be a real number, got {test_fraction!r}',
            expected=float,
            actual=type(test_fraction),
        )
    if not 0 <= test_fraction < 1:
        raise SimharnessValueError(f'test_fraction must be in [0, 1), got {test_fraction}')

    x, y = load_digits_arrays()
    if as_images:
        x = x.reshape(-1, 8, 8, 1)

    rng = np.random.default_rng(seed)
    n = len(y)
    n_test = math.ceil(test_fraction * n)
    perm = rng.permutation(n)
    test_idx = perm[:n_test]
    train_idx = np.sort(perm[n_test:])
    x_test, y_test = x[test_idx], y[test_idx]
    x_train, y_train = x[train_idx], y[train_idx]

    if partition == 'iid':
        if len(y_train) // num_clients < min_size:
            raise SimharnessValueError(
                f'IID split of {len(y_train)} training samples over {num_clients} '
                f'clients gives {len(y_train) // num_clients} per client, fewer '
                f'than min_size={min_size}'
            )
        parts = iid_partition(len(y_train), num_clients, rng)
    else:
        parts = dirichlet_partition(
            y_train, num_clients, float(alpha), rng, min_size=min_size, max_attempts=max_attempts
        )
    data = {str(k): {'x': x_train[idx], 'y': y_train[idx]} for k, idx in enumerate(parts)}
    return ArrayClientData(data), (x_test, y_test)
