"""Tests of simharness' pytest plugin (`simharness.pytest_plugin`)."""
