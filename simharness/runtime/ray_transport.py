"""The Ray transport's public path (the README names `simharness.runtime.ray_transport.RayWorkers`).

The Ray wing lives in `simharness.runtime.ray` (`placement`: arguments and
placement plans; `workers`: the driver side); the actor is a host,
`simharness.hosts.ray_actor.RayWorker`.
"""

from simharness.runtime.ray.placement import (DEFAULT_MAX_RESTARTS, DEFAULT_READY_TIMEOUT,
                                              PLACEMENT_STRATEGIES, check_ray_arguments,
                                              import_ray, placement_from_dict, placement_to_dict,
                                              plan_ray_placements)
from simharness.runtime.ray.workers import RayBroadcast, RayWorkerHandle, RayWorkers

__all__ = ['DEFAULT_MAX_RESTARTS', 'DEFAULT_READY_TIMEOUT', 'PLACEMENT_STRATEGIES', 'RayBroadcast',
           'RayWorkerHandle', 'RayWorkers', 'check_ray_arguments', 'import_ray',
           'placement_from_dict', 'placement_to_dict', 'plan_ray_placements']
