"""Executors, one per module (see simharness.framework for the public names)."""
