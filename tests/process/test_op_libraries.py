"""The driver's TF op libraries (custom ops, here tensorflow_text's) are loaded in its workers.

A client dataset tokenized with ``tf_text.WhitespaceTokenizer`` (TFF's
private_heavy_hitters tutorial) and a ``tf_computation`` that calls a
tensorflow_text op are graphs a worker process can only rebuild once it has
loaded tensorflow_text's op libraries: before, the process stack failed with
``Op type not registered 'TFText>WhitespaceTokenizeWithOffsetsV2'``.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.runtime import op_libraries

pytestmark = pytest.mark.process


@pytest.fixture(scope='module')
def tf_text():
    # Imported by the tests, not at collection: once a process has loaded tensorflow_text,
    # every worker process its stacks start loads its op libraries too (~0.3 s each).
    return pytest.importorskip('tensorflow_text')


def test_the_op_libraries_of_this_process_are_found_by_package(tf_text):
    libs = op_libraries.loaded()
    assert libs is op_libraries.loaded()  # unchanged: the same tuple (one len() to tell)
    packages = {package for package, _ in libs}
    assert 'tensorflow_text' in packages and 'tensorflow' not in packages, libs
    assert ('tensorflow_text', 'python/ops/_whitespace_tokenizer_v2.so') in libs
    numpy_ext = next(pathlib.Path(np.__file__).parent.rglob('_multiarray_umath*.so'))
    assert not op_libraries.needs_tensorflow(str(numpy_ext))  # an extension, no TF in it
    tokenizer = [p for p in map(pathlib.Path, _mapped()) if p.name == '_whitespace_tokenizer_v2.so']
    assert tokenizer and op_libraries.needs_tensorflow(str(tokenizer[0]))


def _mapped():
    with open('/proc/self/maps') as f:
        return {line.split(None, 5)[-1].strip() for line in f if '.so' in line}


def test_a_library_that_is_not_installed_is_reported_not_raised(tf_text):
    failures = op_libraries.load([('no_such_package_here', 'ops/_x.so')])
    assert len(failures) == 1 and 'no_such_package_here' in failures[0]


def _tokenized(tf_text, lines):
    tokenizer = tf_text.WhitespaceTokenizer()
    ds = tf.data.Dataset.from_tensor_slices(lines)
    ds = ds.flat_map(
        lambda line: tf.data.Dataset.from_tensor_slices(
            tokenizer.tokenize(tf.expand_dims(line, 0))[0]
        )
    )
    return ds.filter(
        lambda w: tf.math.logical_not(tf_text.wordshape(w, tf_text.WordShape.IS_PUNCT_OR_SYMBOL))
    )


def _total_the(tf_text):
    @tff.tensorflow.computation(tff.SequenceType(np.str_))
    def count_the(words):
        # tensorflow_text's op inside the computation's own graph
        folded = words.map(tf_text.case_fold_utf8)
        return folded.reduce(np.int32(0), lambda n, w: n + tf.cast(tf.equal(w, 'the'), tf.int32))

    @tff.federated_computation(tff.FederatedType(tff.SequenceType(np.str_), tff.CLIENTS))
    def total_the(clients):
        return tff.federated_sum(tff.federated_map(count_the, clients))

    return total_the


def test_graphs_with_custom_ops_run_in_worker_processes(tf_text, warm_pool):
    data = [
        _tokenized(tf_text, ['The cat , sat', 'on THE mat !']),
        _tokenized(tf_text, ['the end']),
        _tokenized(tf_text, ['no match here']),
    ]
    total_the = _total_the(tf_text)
    with tff.execution_context(tff.framework.local_executor_factory()):
        on_threads = total_the(data)
    with tff.framework.process_executor_factory(pool=warm_pool) as factory:
        with tff.execution_context(factory):
            on_workers = total_the(data)
    assert on_threads == on_workers == 3
