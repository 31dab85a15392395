"""The Ray wing of the runtime: arguments and placement plans (`placement`), the driver side
(`workers`: the actors; `handle`: one slot's calls; `broadcast`: the broadcast arena).

The actor is a host: `simharness.hosts.ray_actor`, given to `RayWorkers` as its ``actor``
(the runtime imports no host). `RayWorkers` (a set of actors that several
`ray_executor_factory` stacks may share, ``workers=``) is the public name here.
"""

from simharness.runtime.ray.workers import RayWorkers

__all__ = ['RayWorkers']
