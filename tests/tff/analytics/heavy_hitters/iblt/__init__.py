"""Tests of ``simharness.analytics.heavy_hitters.iblt`` (TFF's ``heavy_hitters/iblt``)."""
