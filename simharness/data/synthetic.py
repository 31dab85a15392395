"""Synthetic(alpha, beta) of the FedProx paper (the data of the FedAvg reference workload).

With a fixed number of samples per client, `synthetic_alpha_beta` follows
the recipe of ``benchmarks/fedavg-synthetic-mlp.md`` section 1 exactly (one
generator, same draw order, float64 products), so that the defaults
reproduce the reference data bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from simharness.data.client_data import ArrayClientData
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.validation import check_int as _check_int


def _check_std(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise SimharnessTypeError(
            f'{name} must be a real number, got {value!r} ({type(value).__name__})',
            expected=float,
            actual=type(value),
        )
    if not math.isfinite(value) or value < 0:
        raise SimharnessValueError(
            f'{name} is a standard deviation and must be finite and >= 0, got {value}'
        )
    return float(value)


def synthetic_alpha_beta(
    alpha: float = 1.0,
    beta: float = 1.0,
    num_clients: int = 1000,
    samples_per_client: Optional[int] = 50,
    dim: int = 60,
    num_classes: int = 10,
    seed: int = 0,
    iid: bool = False,
) -> ArrayClientData:
    """Synthetic(alpha, beta) from FedProx (Li et al., 2020).

    Each client k has a local softmax-regression model and its own input
    distribution. All draws come from one ``np.random.default_rng(seed)``;
    per client, in this order (the reference recipe)::

        u_k = normal(0, alpha)                 # model heterogeneity
        B_k = normal(0, beta)                  # data heterogeneity
        W_k = normal(u_k, 1, (num_classes, dim))
        b_k = normal(u_k, 1, (num_classes,))
        v_k = normal(B_k, 1, (dim,))
        x_k = v_k + standard_normal((n_k, dim)) * sqrt(diag)  # diag_j = j**-1.2
        y_k = argmax(x_k @ W_k.T + b_k, axis=1)              # float64

    and ``x`` is stored as float32, ``y`` as int32. There is no
    normalisation or shuffling. alpha and beta are standard deviations, as
    in the FedProx code.

    Client sizes: if `samples_per_client` is an int, every client has that
    many samples and nothing else is drawn (this is exactly the reference
    recipe). If it is None, sizes are drawn first, as in the FedProx code:
    ``n_k = int(lognormal(4, 2)) + 50`` for all clients in one call
    ``rng.lognormal(4, 2, num_clients)``, and the per-client draws above
    follow from the same generator. Lognormal(4, 2) is heavy tailed: the
    mean size is about 450 and the largest of 1000 clients is typically
    tens of thousands of samples.

    IID variant (``iid=True``, FedProx "Synthetic IID"): all clients share
    one model ``W = normal(0, 1, (num_classes, dim))``,
    ``b = normal(0, 1, (num_classes,))`` drawn right after the sizes (if
    any); per client only ``B_k = normal(0, beta)`` is drawn, ``v_k = B_k``
    in every coordinate, then ``x_k`` as above. alpha is unused; the paper's
    IID set corresponds to ``beta=0`` (all input means zero).

    Args:
        alpha: std of the per-client model mean u_k (>= 0).
        beta: std of the per-client input mean B_k (>= 0).
        num_clients: number of clients K (>= 1).
        samples_per_client: samples per client (>= 1), or None for
            lognormal sizes.
        dim: input dimension (>= 1).
        num_classes: number of classes (>= 2).
        seed: seed of the one generator (>= 0).
        iid: use the IID variant.

    Returns:
        An `ArrayClientData` with client ids ``'0' .. str(K-1)`` and arrays
        ``{'x': float32 [n_k, dim], 'y': int32 [n_k]}``.

    Raises:
        SimharnessTypeError: an argument of the wrong type.
        SimharnessValueError: an argument out of range.
    """
    alpha = _check_std('alpha', alpha)
    beta = _check_std('beta', beta)
    num_clients = _check_int('num_clients', num_clients, 1)
    if samples_per_client is not None:
        samples_per_client = _check_int('samples_per_client', samples_per_client, 1)
    dim = _check_int('dim', dim, 1)
    num_classes = _check_int('num_classes', num_classes, 2)
    seed = _check_int('seed', seed, 0)
    if not isinstance(iid, (bool, np.bool_)):
        raise SimharnessTypeError(
            f'iid must be a bool, got {iid!r}', expected=bool, actual=type(iid)
        )

    rng = np.random.default_rng(seed)
    if samples_per_client is None:
        sizes = rng.lognormal(4, 2, num_clients).astype(np.int64) + 50
    else:
        sizes = np.full(num_clients, samples_per_client, dtype=np.int64)
    sqrt_diag = np.sqrt(np.arange(1, dim + 1, dtype=np.float64) ** -1.2)
    if iid:
        w_global = rng.normal(0, 1, size=(num_classes, dim))
        b_global = rng.normal(0, 1, size=(num_classes,))

    def client(k: int) -> tuple[np.ndarray, np.ndarray]:
        if iid:
            b_k = rng.normal(0, beta)
            w, b = w_global, b_global
            v = np.full(dim, b_k)
        else:
            u_k = rng.normal(0, alpha)
            b_k = rng.normal(0, beta)
            w = rng.normal(u_k, 1, size=(num_classes, dim))
            b = rng.normal(u_k, 1, size=(num_classes,))
            v = rng.normal(b_k, 1, size=(dim,))
        x = v + rng.standard_normal((int(sizes[k]), dim)) * sqrt_diag
        y = np.argmax(x @ w.T + b, axis=1)
        return x, y

    if samples_per_client is not None:
        xs = np.empty((num_clients, samples_per_client, dim), np.float32)
        ys = np.empty((num_clients, samples_per_client), np.int32)
        for k in range(num_clients):
            xs[k], ys[k] = client(k)
        return ArrayClientData.from_stacked(xs, ys)
    data = {}
    for k in range(num_clients):
        x, y = client(k)
        data[str(k)] = {'x': x.astype(np.float32), 'y': y.astype(np.int32)}
    return ArrayClientData(data)
