"""Tests of ``simharness.analytics.heavy_hitters`` (TFF's ``analytics/heavy_hitters``)."""
