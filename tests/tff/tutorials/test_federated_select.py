"""TFF 0.88's ``docs/tutorials/federated_select.ipynb``, renamed.

Every code cell runs as written (no data to replace); the tutorial's own
``tff.backends.native.set_sync_local_cpp_execution_context(default_num_clients=3)``
replaces the default context (worker processes), so the test puts back
the default simharness makes afterwards. The recorded
result of the deterministic example (``[b'a,b', b'b,c', b'c,a']``) is
asserted; the random one must pick one of the server's strings per client.
Left out: ``!pip``.
"""

import pytest

from simharness.core import context_stack


@pytest.fixture
def restore_default():
    yield
    context_stack.replace_default(None, owned=True)


def _tutorial():
    # cell 6
    import simharness as federated_language
    import numpy as np
    import tensorflow as tf
    import simharness as tff

    # cell 9
    list_of_strings_type = federated_language.TensorType(np.str_, [None])
    # We only ever send exactly two values to each client. The number of keys per
    # client must be a fixed number across all clients.
    number_of_keys_per_client = 2
    keys_type = federated_language.TensorType(np.int32, [number_of_keys_per_client])
    get_size = tff.tensorflow.computation(lambda x: tf.size(x))
    select_fn = tff.tensorflow.computation(lambda val, index: tf.gather(val, index))
    client_data_type = np.str_

    # A function from our client data to the indices of the values we'd like to
    # select from the server.
    @tff.tensorflow.computation(client_data_type)
    def keys_for_client(client_string):
      # We assume our client data is a single string consisting of exactly three
      # comma-separated integers indicating which values to grab from the server.
      split = tf.strings.split([client_string], sep=',')[0]
      return tf.strings.to_number([split[0], split[1]], tf.int32)

    @tff.tensorflow.computation(federated_language.SequenceType(np.str_))
    def concatenate(values):
      def reduce_fn(acc, item):
        return tf.cond(
            tf.math.equal(acc, ''),
            lambda: item,
            lambda: tf.strings.join([acc, item], ','),
        )

      return values.reduce('', reduce_fn)

    @federated_language.federated_computation(
        federated_language.FederatedType(
            list_of_strings_type, federated_language.SERVER
        ),
        federated_language.FederatedType(
            client_data_type, federated_language.CLIENTS
        ),
    )
    def broadcast_based_on_client_data(list_of_strings_at_server, client_data):
      keys_at_clients = federated_language.federated_map(
          keys_for_client, client_data
      )
      max_key = federated_language.federated_map(
          get_size, list_of_strings_at_server
      )
      values_at_clients = federated_language.federated_select(
          keys_at_clients, max_key, list_of_strings_at_server, select_fn
      )
      value_at_clients = federated_language.federated_map(
          concatenate, values_at_clients
      )
      return value_at_clients

    # cell 11
    client_data = ['0,1', '1,2', '2,0']
    first = broadcast_based_on_client_data(['a', 'b', 'c'], client_data)

    # cell 14
    @tff.tensorflow.computation(np.int32)
    def get_random_key(max_key):
      return tf.random.uniform(shape=[1], minval=0, maxval=max_key, dtype=tf.int32)

    list_of_strings_type = federated_language.TensorType(np.str_, [None])
    get_size = tff.tensorflow.computation(lambda x: tf.size(x))
    select_fn = tff.tensorflow.computation(lambda val, index: tf.gather(val, index))

    @tff.tensorflow.computation(federated_language.SequenceType(np.str_))
    def get_last_element(sequence):
      return sequence.reduce('', lambda _initial_state, val: val)

    @federated_language.federated_computation(
        federated_language.FederatedType(
            list_of_strings_type, federated_language.SERVER
        )
    )
    def broadcast_random_element(list_of_strings_at_server):
      max_key_at_server = federated_language.federated_map(
          get_size, list_of_strings_at_server
      )
      max_key_at_clients = federated_language.federated_broadcast(max_key_at_server)
      key_at_clients = federated_language.federated_map(
          get_random_key, max_key_at_clients
      )
      random_string_sequence_at_clients = federated_language.federated_select(
          key_at_clients, max_key_at_server, list_of_strings_at_server, select_fn
      )
      # Even though we only passed in a single key, `federated_select` returns a
      # sequence for each client. We only care about the last (and only) element.
      random_string_at_clients = federated_language.federated_map(
          get_last_element, random_string_sequence_at_clients
      )
      return random_string_at_clients

    # cell 16
    tff.backends.native.set_sync_local_cpp_execution_context(default_num_clients=3)

    # cell 18
    second = broadcast_random_element(tf.convert_to_tensor(['foo', 'bar', 'baz']))

    return first, second


def test_federated_select_tutorial(restore_default):
    first, second = _tutorial()
    assert list(first) == [b'a,b', b'b,c', b'c,a']
    assert len(second) == 3
    assert set(second) <= {b'foo', b'bar', b'baz'}
