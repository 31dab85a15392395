"""TFF 0.88's ``docs/tutorials/private_heavy_hitters.ipynb``, renamed.

Shakespeare (``tff.simulation.datasets.shakespeare.load_data()``, a
download) is replaced by 10 clients of snippets in Shakespeare's element
structure (``OrderedDict(snippets=string[])``) whose words are known: word k
of `WORDS` appears in 10 - k clients (in several spellings of case, repeated
within a client, beside punctuation the tutorial's tokenizer drops), so the
heavy hitters and their counts are known exactly and asserted (the tutorial
prints them). Every other cell runs as written, tensorflow_text's tokenizer
included (``tensorflow-text`` is in the test extra; the test is skipped where
it is not installed). The tutorial's test context
(``tff.backends.test.set_sync_test_cpp_execution_context()``) replaces the
default context; the test puts back the default simharness makes afterwards.
(The same computation on worker processes, whose graphs need tensorflow_text's
ops: tests/tff/analytics/heavy_hitters and tests/process/test_op_libraries.py.)
Left out: ``!pip``.
"""

import collections

import numpy as np
import pytest

from simharness.core import context_stack

#: The words of the synthetic clients, the most frequent first.
WORDS = ['thee', 'and', 'to', 'of', 'my', 'lord', 'in', 'that']


@pytest.fixture
def restore_default():
    yield
    context_stack.replace_default(None, owned=True)


def _source():
    import simharness as tff
    clients = collections.OrderedDict()
    for i in range(10):
        words = WORDS[:min(len(WORDS), 10 - i)]
        lines = [' '.join(w.upper() if (i + k) % 3 == 0 else w for k, w in enumerate(words)),
                 ' , '.join(words[::-1]) + ' !', '-- ' + words[0]]
        clients[f'client_{i:02d}'] = collections.OrderedDict(
            snippets=np.array(lines, dtype=object))
    return tff.simulation.datasets.TestClientData(clients), None


def test_private_heavy_hitters_tutorial(restore_default):
    tf_text = pytest.importorskip('tensorflow_text')  # noqa: F841  (the tutorial imports it)

    # cell 3

    import simharness as federated_language
    import numpy as np  # noqa: F811
    import tensorflow as tf
    import simharness as tff
    import tensorflow_text as tf_text

    np.random.seed(0)
    tff.backends.test.set_sync_test_cpp_execution_context()

    assert federated_language.federated_computation(lambda: 'Hello, World!')() == b'Hello, World!'

    # cell 4 (a download): Shakespeare's structure, known words
    source, _ = _source()

    # cell 5
    def tokenize(ds):
      """Tokenizes a line into words with alphanum characters."""

      def extract_strings(example):
        return tf.expand_dims(example['snippets'], 0)

      def tokenize_line(line):
        return tf.data.Dataset.from_tensor_slices(tokenizer.tokenize(line)[0])

      def mask_all_symbolic_words(word):
        return tf.math.logical_not(
            tf_text.wordshape(word, tf_text.WordShape.IS_PUNCT_OR_SYMBOL)
        )

      tokenizer = tf_text.WhitespaceTokenizer()
      ds = ds.map(extract_strings)
      ds = ds.flat_map(tokenize_line)
      ds = ds.map(tf_text.case_fold_utf8)
      ds = ds.filter(mask_all_symbolic_words)
      return ds

    batch_size = 5

    def client_data(n: int) -> tf.data.Dataset:
      return tokenize(
          source.create_tf_dataset_for_client(source.client_ids[n])
      ).batch(batch_size)

    # Pick a subset of client devices to participate in the computation.
    dataset = [client_data(n) for n in range(10)]

    # cell 6
    max_words_per_user = 8
    iblt_computation = tff.analytics.heavy_hitters.iblt.build_iblt_computation(
        capacity=100,
        string_max_bytes=20,
        max_words_per_user=max_words_per_user,
        max_heavy_hitters=10,
        secure_sum_bitwidth=32,
        multi_contribution=False,
        batch_size=batch_size,
    )

    # cell 7
    def run_simulation(
        one_round_computation: federated_language.Computation, dataset
    ):
      output = one_round_computation(dataset)
      heavy_hitters = output.heavy_hitters
      heavy_hitters_counts = output.heavy_hitters_counts
      heavy_hitters = [word.decode('utf-8', 'ignore') for word in heavy_hitters]

      results = {}
      for index in range(len(heavy_hitters)):
        results[heavy_hitters[index]] = heavy_hitters_counts[index]
      return output.clients, dict(results)

    # cell 8
    clients, result = run_simulation(iblt_computation, dataset)
    print(f'Number of clients participated: {clients}')
    print('Discovered heavy hitters and counts:')
    print(result)

    expected = {w: 10 - k for k, w in enumerate(WORDS)}  # once per client that has it
    assert clients == 10
    assert result == expected

    # cell 9
    iblt_computation = tff.analytics.heavy_hitters.iblt.build_iblt_computation(
        capacity=100,
        string_max_bytes=20,
        max_words_per_user=max_words_per_user,
        secure_sum_bitwidth=32,
        multi_contribution=False,
        batch_size=batch_size,
    )

    clients, result = run_simulation(iblt_computation, dataset)
    assert (clients, result) == (10, expected)

    # cell 10
    # DP parameters
    eps = 20
    delta = 0.01

    # Calculating scale for Laplace noise
    scale = max_words_per_user / eps

    # Calculating the threshold
    tau = 1 + (max_words_per_user / eps) * np.log(max_words_per_user / (2 * delta))

    result_with_dp = {}
    for word in result:
      noised_count = result[word] + np.random.laplace(scale=scale)
      if noised_count >= tau:
        result_with_dp[word] = int(noised_count)
    print('Discovered heavy hitters and counts with central DP:')
    print(result_with_dp)

    assert set(result_with_dp) <= set(expected)
    assert all(abs(result_with_dp[w] - expected[w]) <= 3 for w in result_with_dp)

