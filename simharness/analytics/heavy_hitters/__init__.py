"""Private heavy hitters (TFF's ``analytics/heavy_hitters``): ``iblt``."""

from simharness.analytics.heavy_hitters import iblt

__all__ = ['iblt']
