"""The worker pool's forkserver preload: TensorFlow (`simharness._tf_preload`), imported
while a thread watches the driver (`lifeline.DriverWatchWhilePreloading`): a driver
killed during the import leaves no forkserver behind it.

Named only as a forkserver preload (``set_forkserver_preload``), by
`simharness.runtime.local.process.get_forkserver_context`.
"""

from simharness.runtime.local.lifeline import DriverWatchWhilePreloading

with DriverWatchWhilePreloading():
    import simharness._tf_preload  # noqa: F401  pylint: disable=unused-import
