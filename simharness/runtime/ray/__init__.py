"""The Ray wing of the runtime: arguments and placement plans (`placement`), the driver side (`workers`).

The actor is a host: `simharness.hosts.ray_actor`.
"""
