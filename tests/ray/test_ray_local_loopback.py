"""A local Ray (``ray_executor_factory()`` with no address) listens on loopback by default.

Pure: checks the arguments given to ``ray.init`` (Ray need not be installed).
"""

from __future__ import annotations

from simharness.runtime.ray.placement import LOCAL_RAY_NODE_IP, ray_init_arguments


def test_a_local_ray_binds_loopback_unless_told_otherwise():
    args = ray_init_arguments(None, {}, False)
    assert LOCAL_RAY_NODE_IP == '127.0.0.1' and args['_node_ip_address'] == '127.0.0.1'
    assert args['address'] is None and args['include_dashboard'] is False
    # The user's choice wins (a node reachable from other machines).
    assert ray_init_arguments(None, {'_node_ip_address': '10.0.0.5'},
                              False)['_node_ip_address'] == '10.0.0.5'


def test_joining_a_cluster_leaves_the_address_to_ray():
    for address in ('auto', 'ray://head:10001', 'head:6379'):
        args = ray_init_arguments(address, {'num_cpus': 2}, True)
        assert '_node_ip_address' not in args
        assert args['address'] == address and args['num_cpus'] == 2 and args['log_to_driver']
