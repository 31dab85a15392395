"""TFF's ``hierarchical_histogram/hierarchical_histogram_decoder.py``: queries on a tree.

`HierarchicalHistogramDecoder` answers node, range and quantile queries on
a hierarchical histogram (a ``tf.RaggedTensor``, ``tree[layer][index]``,
root first). For a noised tree it offers two accuracy tricks:
``use_efficient=True`` (Honaker, "Efficient Use of Differentially Private
Binary Trees": each node re-estimated from its subtree and from the rest of
the tree) and `enforce_consistency` (the least-squares consistent tree;
Cormode, Kulkarni, Srivastava; it turns ``use_efficient`` off).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from simharness.analytics.hierarchical_histogram import build_tree_from_leaf

__all__ = ['HierarchicalHistogramDecoder']


def _check_hierarchical_histogram_shape(hierarchical_histogram):
    """Raises ValueError unless the layers have 1, arity, arity ** 2, ... nodes."""
    if len(hierarchical_histogram) < 1 or len(hierarchical_histogram[0]) != 1:
        raise ValueError('Input hierarchical histogram is invalid.')
    depth = len(hierarchical_histogram)
    if depth == 1:
        return
    arity = len(hierarchical_histogram[1]) / len(hierarchical_histogram[0])
    for layer in range(1, depth - 1):
        below, here = len(hierarchical_histogram[layer + 1]), len(hierarchical_histogram[layer])
        if below % here != 0 or below / here != arity:
            raise ValueError('Input hierarchical histogram is invalid.')


class HierarchicalHistogramDecoder:
    """Node / range / quantile queries on a hierarchical histogram.

    Args:
      hierarchical_histogram: the tree, a ``tf.RaggedTensor`` (as rebuilt from
        `build_hierarchical_histogram_process`'s result).
      lower_bound: the lower bound of the histogram's data range.
      upper_bound: the upper bound of the histogram's data range.
      use_efficient: use Honaker's estimator for node queries (for noised
        trees; default False).

    Raises:
      ValueError: the layers are not those of a complete tree.
    """

    def __init__(
        self,
        hierarchical_histogram: tf.RaggedTensor,
        lower_bound: float,
        upper_bound: float,
        use_efficient: bool = False,
    ):
        self._hierarchical_histogram = hierarchical_histogram.to_list()
        self._lower_bound = lower_bound
        self._upper_bound = upper_bound
        _check_hierarchical_histogram_shape(self._hierarchical_histogram)
        if len(self._hierarchical_histogram) == 1:
            self._arity = 2
        else:
            self._arity = int(
                len(self._hierarchical_histogram[1]) / len(self._hierarchical_histogram[0])
            )
        self._size = len(hierarchical_histogram[-1])
        self._num_layers = math.ceil(math.log(self._size, self._arity)) + 1
        self._use_efficient = use_efficient

    def _right_most_leaf(self, layer: int, index: int) -> int:
        """The rightmost leaf under node (layer, index)."""
        reverse_depth = self._num_layers - 1 - layer
        return int((index + 1) * (self._arity**reverse_depth) - 1)

    def _left_right_most_leaf(self, layer: int, index: int) -> tuple[int, int]:
        """The leftmost and rightmost leaves under node (layer, index)."""
        reverse_depth = self._num_layers - 1 - layer
        return (
            int(index * (self._arity**reverse_depth)),
            int((index + 1) * (self._arity**reverse_depth) - 1),
        )

    def _flatten_hierarhical_hist(self):
        """The nodes, layer after layer, as one array."""
        flattened = []
        for layer in range(self._num_layers):
            flattened.extend(self._hierarchical_histogram[layer])
        return np.array(flattened)

    def _construct_matrix(self):
        """The 0/1 matrix mapping leaves to nodes (rows: nodes, columns: leaves)."""
        row_size = (self._arity**self._num_layers - 1) // (self._arity - 1)
        col_size = self._arity ** (self._num_layers - 1)
        matrix = np.zeros([row_size, col_size])
        row_index = 0
        for layer in range(self._num_layers):
            for index in range(self._arity**layer):
                left, right = self._left_right_most_leaf(layer, index)
                matrix[row_index][left : right + 1] = 1
                row_index += 1
        return matrix

    def _check_consistency(self) -> bool:
        """Whether every parent is (np.isclose) the sum of its children."""
        for layer in range(self._num_layers - 1):
            for index in range(self._arity**layer):
                parent = self._hierarchical_histogram[layer][index]
                children_sum = 0.0
                for child in range(index * self._arity, (index + 1) * self._arity):
                    children_sum += self._hierarchical_histogram[layer + 1][child]
                if not np.isclose(parent, children_sum):
                    return False
        return True

    def enforce_consistency(self):
        """Replaces the tree by its least-squares consistent one (and sets use_efficient off).

        Both tricks together do not improve accuracy further, so Honaker's
        estimator is turned off.
        """
        self._use_efficient = False
        if self._check_consistency():
            return
        consistent_hist = np.linalg.lstsq(
            self._construct_matrix(), self._flatten_hierarhical_hist(), rcond=None
        )[0]
        self._hierarchical_histogram = build_tree_from_leaf.create_hierarchical_histogram(
            consistent_hist, self._arity
        )

    def _check_index(self, layer: int, index: int):
        """Raises ValueError unless (layer, index) is a node."""
        if layer < 0 or layer >= self._num_layers:
            raise ValueError(
                f'Cross-layer index {layer} is out of valid range. '
                f'Expected to be within [0, {self._num_layers}).'
            )
        if index < 0 or index >= self._arity**layer:
            raise ValueError(
                f'Inner-layer index {index} is out of valid range. '
                f'Expected to be within [0, {self._arity**layer}).'
            )

    def _from_below(self, layer: int, index: int) -> float:
        """Honaker's estimate of node (layer, index) from its subtree."""
        if layer == self._num_layers - 1:
            return self._hierarchical_histogram[layer][index]
        node_value = self._hierarchical_histogram[layer][index]
        below_value = 0
        for child_index in range(index * self._arity, (index + 1) * self._arity):
            below_value += self._from_below(layer + 1, child_index)
        weight = self._arity / (self._arity + 1)
        return weight * node_value + (1 - weight) * below_value

    def _above_value(self, layer: int, index: int) -> float:
        """The parent's estimate from above minus the siblings' estimates from below."""
        parent_index = index // self._arity
        above_value = self._from_above(layer - 1, parent_index)
        for sibling_index in range(parent_index * self._arity, (parent_index + 1) * self._arity):
            if sibling_index != index:
                above_value -= self._from_below(layer, sibling_index)
        return above_value

    def _from_above(self, layer: int, index: int) -> float:
        """Honaker's estimate of node (layer, index) from the nodes outside its subtree."""
        if layer == 0:
            return self._hierarchical_histogram[layer][index]
        node_value = self._hierarchical_histogram[layer][index]
        above_value = self._above_value(layer, index)
        weight = 1 / (3 - math.pow(self._arity, layer - self._num_layers + 1))
        return weight * node_value + (1 - weight) * above_value

    def node_query(self, layer: int, index: int) -> float:
        """The (estimated) value of node (layer, index).

        Raises:
          ValueError: (layer, index) is not a node.
        """
        self._check_index(layer, index)
        if not self._use_efficient:
            return self._hierarchical_histogram[layer][index]
        below_value = self._from_below(layer, index)
        if layer == 0:
            return below_value
        above_value = self._above_value(layer, index)
        below_variance = 1 / (2 - (self._arity ** (layer - self._num_layers + 1)))
        above_variance = 1 / (3 - (self._arity ** (layer - self._num_layers + 1)))
        weight = (1 / below_variance) / (
            (1 / below_variance) + (1 / (below_variance + above_variance))
        )
        return weight * below_value + (1 - weight) * above_value

    def _range_query(self, left: int, right: int, layer: int, index: int) -> float:
        """The sum of the leaves in [left, right] under node (layer, index)."""
        left_most_leaf, right_most_leaf = self._left_right_most_leaf(layer, index)
        if left > right_most_leaf or right < left_most_leaf or left > right:
            return 0
        if left <= left_most_leaf and right >= right_most_leaf:
            return self.node_query(layer, index)
        range_sum = 0
        for child_index in range(index * self._arity, (index + 1) * self._arity):
            interval_left, interval_right = self._left_right_most_leaf(layer + 1, child_index)
            range_sum += self._range_query(
                max(left, interval_left), min(right, interval_right), layer + 1, child_index
            )
        return range_sum

    def range_query(self, left: int, right: int) -> float:
        """The sum of the bins in [left, right] (inclusive).

        Raises:
          ValueError: the range is outside ``[0, size)`` or ``left > right``.
        """
        if left < 0 or right >= self._size:
            raise ValueError(f'[{left}, {right}] is outside the valid range [0, {self._size}).')
        if left > right:
            raise ValueError(f'left {left} is expected to be less than or equal to right {right}.')
        return self._range_query(left, right, 0, 0)

    def _quantile_query(self, expected_weight: float, layer: int, index: int) -> int:
        """The leftmost leaf under (layer, index) with at least `expected_weight` before it."""
        if layer == self._num_layers - 1:
            return index
        exclusive_left_children_sum = 0.0
        quantile = None
        for child_index in range(index * self._arity, (index + 1) * self._arity):
            left_children_sum = exclusive_left_children_sum + self.node_query(
                layer + 1, child_index
            )
            if left_children_sum == expected_weight:
                quantile = self._right_most_leaf(layer + 1, child_index)
                break
            elif left_children_sum > expected_weight:
                quantile = self._quantile_query(
                    expected_weight - exclusive_left_children_sum, layer + 1, child_index
                )
                break
            exclusive_left_children_sum = left_children_sum
        if quantile is None:  # TFF: an unbound local (NameError); no child reached the weight
            raise ValueError(f'no bin reaches the weight {expected_weight}.')
        return quantile

    def quantile_query(self, q) -> tuple[float, float]:
        """The value range of the bin holding the `q`-quantile.

        The bin is the leftmost one such that the bins up to it hold at least
        a `q` share of the total.

        Raises:
          ValueError: the tree is not consistent (call `enforce_consistency`),
            or `q` is not in [0, 1].
        """
        if not self._check_consistency():
            raise ValueError(
                'Quantile query can only be run on consistent hierarchical '
                'histogram. Call `enforce_consistency` before running '
                '`quantile_query`.'
            )
        if not 0 <= q <= 1:
            raise ValueError(f'`q={q}` is expected to be within [0, 1].')
        total_weight = self.range_query(0, self._size - 1)
        bin_index = self._quantile_query(q * total_weight, 0, 0)
        bin_size = (self._upper_bound - self._lower_bound) / self._size
        bin_lower_bound = self._lower_bound + bin_index * bin_size
        return bin_lower_bound, bin_lower_bound + bin_size
