"""Heavy hitters by invertible Bloom lookup tables (TFF's ``analytics/heavy_hitters/iblt``)."""

from simharness.analytics.heavy_hitters.iblt.chunkers import CharacterEncoding, create_chunker
from simharness.analytics.heavy_hitters.iblt.hyperedge_hashers import (
    CoupledHyperEdgeHasher,
    RandomHyperEdgeHasher,
)
from simharness.analytics.heavy_hitters.iblt.iblt_clipping import ClippingIbltFactory
from simharness.analytics.heavy_hitters.iblt.iblt_lib import (
    DEFAULT_REPETITIONS,
    IbltDecoder,
    IbltEncoder,
    decode_iblt_tf,
)
from simharness.analytics.heavy_hitters.iblt.iblt_tensor import (
    IbltTensorDecoder,
    IbltTensorEncoder,
    decode_iblt_tensor_tf,
)
from simharness.analytics.heavy_hitters.iblt.iblt_tff import build_iblt_computation

__all__ = [
    'CharacterEncoding',
    'ClippingIbltFactory',
    'CoupledHyperEdgeHasher',
    'DEFAULT_REPETITIONS',
    'IbltDecoder',
    'IbltEncoder',
    'IbltTensorDecoder',
    'IbltTensorEncoder',
    'RandomHyperEdgeHasher',
    'build_iblt_computation',
    'create_chunker',
    'decode_iblt_tensor_tf',
    'decode_iblt_tf',
]
