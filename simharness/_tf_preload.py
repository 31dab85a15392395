"""The worker pool's forkserver preload: TensorFlow, imported without start-up noise
and without Keras (workers run graphs; `simharness.tfquiet._KerasNotNow`).

Its only purpose is this side effect (``set_forkserver_preload`` takes
module names): see `simharness.tfquiet`. What the import made lives as long
as the forkserver and every worker forked from it: it is moved out of the
garbage collector's reach (``gc.freeze``, Python's advice before forking),
so that a worker's full collections do not scan TF's modules again (and do
not write to the pages it shares with the forkserver).
"""

import gc

from simharness.tfquiet import import_tensorflow

import_tensorflow(keras=False)
gc.collect()
gc.freeze()
