"""TFF's ``hierarchical_histogram/build_tree_from_leaf.py``: a histogram's tree, in numpy."""

from __future__ import annotations

import math

import numpy as np

__all__ = ['create_hierarchical_histogram']


def create_hierarchical_histogram(histogram, arity: int) -> list:
    """The hierarchical form of `histogram`: a list of layers, root first.

    The leaves are padded with zeros up to a power of `arity`; each parent is
    the sum of its `arity` children.

    Args:
      histogram: an array_like histogram (the leaves).
      arity: the branching factor (>= 2).

    Raises:
      ValueError: ``arity < 2``.
    """
    if arity < 2:
        raise ValueError(f'Arity should be at least 2.arity={arity} is given.')
    depth = math.ceil(math.log(len(histogram), arity)) + 1
    size = arity ** (depth - 1)
    leaves = np.pad(
        histogram, (0, size - len(histogram)), 'constant', constant_values=(0, 0)
    ).tolist()
    layers = [leaves]
    for _ in range(depth - 1):
        layers.insert(0, np.sum(np.reshape(layers[0], (-1, arity)), axis=1).tolist())
    return layers
