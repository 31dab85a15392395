"""TFF's federated analytics (``tff.analytics``), renamed: ``import simharness as tff``.

The modules of TFF 0.88's ``tensorflow_federated/python/analytics``, with its
names, signatures, defaults and math:

* ``heavy_hitters.iblt``: heavy hitters by invertible Bloom lookup tables
  (`build_iblt_computation`, `IbltFactory`, `ClippingIbltFactory`, the
  encoders, decoders, chunkers and hyperedge hashers);
* ``hierarchical_histogram``: differentially private hierarchical histograms
  (`build_hierarchical_histogram_process`, `HierarchicalHistogramDecoder`);
* ``count_distinct`` (HyperLogLog), ``data_processing`` (dataset helpers),
  ``histogram_processing``, ``differential_privacy``.

The submodules load on first use (each imports TensorFlow), as TFF's names
``tff.analytics.IbltFactory``, ``tff.analytics.HierarchicalHistogramDecoder``
and ``tff.analytics.build_hierarchical_histogram_process`` do.
"""

from __future__ import annotations

from typing import Any

from simharness.lazy_names import LazyNames

_SUBMODULES = frozenset(
    {
        'count_distinct',
        'data_processing',
        'differential_privacy',
        'heavy_hitters',
        'histogram_processing',
        'hierarchical_histogram',
    }
)

#: TFF's names at ``tff.analytics`` itself, and the module each comes from.
_NAMES = {
    'IbltFactory': 'heavy_hitters.iblt.iblt_factory',
    'HierarchicalHistogramDecoder': 'hierarchical_histogram.hierarchical_histogram_decoder',
    'build_hierarchical_histogram_process': 'hierarchical_histogram.hierarchical_histogram_lib',
}

__all__ = sorted(_SUBMODULES | set(_NAMES))

_LAZY = LazyNames(__name__, _NAMES, _SUBMODULES)


def __getattr__(name: str) -> Any:
    return _LAZY.attribute(name)


def __dir__() -> list:
    return _LAZY.listing()
