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
    assert (
        ray_init_arguments(None, {'_node_ip_address': '10.0.0.5'}, False)['_node_ip_address']
        == '10.0.0.5'
    )


def test_joining_a_cluster_leaves_the_address_to_ray():
    for address in ('auto', 'ray://head:10001', 'head:6379'):
        args = ray_init_arguments(address, {'num_cpus': 2}, True)
        assert '_node_ip_address' not in args
        assert args['address'] == address and args['num_cpus'] == 2 and args['log_to_driver']


def test_starting_ray_drops_only_its_token_notice(caplog):
    """`quiet_ray_start`: Ray's notice that it turned token authentication on is dropped while
    simharness starts Ray; Ray's other warnings, and the notice afterwards, are kept."""
    import logging

    from simharness.runtime.ray.placement import RAY_TOKEN_NOTICE, quiet_ray_start

    logger = logging.getLogger(RAY_TOKEN_NOTICE[0])
    notice = RAY_TOKEN_NOTICE[1] + '. Set RAY_AUTH_MODE=disabled to opt out.'
    with caplog.at_level(logging.WARNING, logger=RAY_TOKEN_NOTICE[0]):
        with quiet_ray_start():
            logger.warning(notice)
            logger.warning('Token authentication is disabled for this Ray cluster.')
        logger.warning(notice)
    assert [r.getMessage() for r in caplog.records] == [
        'Token authentication is disabled for this Ray cluster.',
        notice,
    ]
