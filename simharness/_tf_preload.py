"""The worker pool's forkserver preload: TensorFlow, imported without start-up noise
and without Keras (workers run graphs; `simharness.tfquiet._KerasNotNow`).

Its only purpose is this side effect (``set_forkserver_preload`` takes
module names): see `simharness.tfquiet`.
"""

from simharness.tfquiet import import_tensorflow

import_tensorflow(keras=False)
