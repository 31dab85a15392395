"""TFF 0.88's ``docs/tutorials/federated_learning_for_text_generation.ipynb``, renamed.

Shakespeare (a download) is replaced by `synthetic.shakespeare_like` (the same
client names and element structure, random text over the tutorial's
vocabulary); the downloaded pre-trained character model by
`synthetic.char_model` (Embedding -> GRU -> Dense, untrained); sequence
length 20 (tutorial: 100) and 1 round (5). Default context.

Left out / changed:
- ``!pip``; cells 12-13 and 41 (``generate_text``: sampling text from the
  pre-trained batch-1 model, which is not available).
- cell 6 calls ``tff.tensorflow_computation``, absent from TFF 0.88 (a
  tutorial bug): ``tff.tensorflow.computation`` here.
- ``load_model``'s download (``get_file`` / ``load_model``) and its
  batch-size assertion: `synthetic.char_model`.
- cell 31: ``tf.keras.models.clone_model`` of the compiled model fails inside
  the computation's graph under Keras 3 (it reads the RMSprop learning rate
  with ``.numpy()``; TFF 0.88 on Keras 3 too): ``load_model(BATCH_SIZE)``.
- cell 39 runs as written: the model's weights leave out Keras 3's GRU
  seed-generator state, as ``keras_model.non_trainable_weights`` does
  (`simharness.learning.models.keras_seeds`).
"""



def test_federated_learning_for_text_generation_tutorial():
    # cell 6
    import collections

    import numpy as np
    import tensorflow as tf
    import simharness as tff

    np.random.seed(0)

    # Test that TFF is working:
    tff.tensorflow.computation(lambda: 'Hello, World!')()

    # cell 9
    # A fixed vocabularly of ASCII chars that occur in the works of Shakespeare and Dickens:
    vocab = list(
        'dhlptx@DHLPTX'
        ' $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r'
    )

    # Creating a mapping from unique characters to indices
    char2idx = {u: i for i, u in enumerate(vocab)}
    idx2char = np.array(vocab)

    # cell 11
    from tests.tff.tutorials import synthetic as synth
    def load_model(batch_size):
      urls = {
          1: 'https://storage.googleapis.com/tff-models-public/dickens_rnn.batch1.kerasmodel',
          8: 'https://storage.googleapis.com/tff-models-public/dickens_rnn.batch8.kerasmodel',
      }
      pass  # PATCHED (download)
      url = urls[batch_size]
      return synth.char_model(batch_size)  # PATCHED: a small untrained model in place of the download

    # cell 15
    from tests.tff.tutorials import synthetic as synth
    _names = ['THE_TRAGEDY_OF_KING_LEAR_KING', 'ALL_S_WELL_THAT_ENDS_WELL_CELIA', 'MUCH_ADO_ABOUT_NOTHING_OTHELLO']
    train_data, test_data = synth.shakespeare_like(_names), synth.shakespeare_like(_names, seed=1)

    # cell 17
    # Here the play is "The Tragedy of King Lear" and the character is "King".
    raw_example_dataset = train_data.create_tf_dataset_for_client(
        'THE_TRAGEDY_OF_KING_LEAR_KING'
    )
    # To allow for future extensions, each entry x
    # is an OrderedDict with a single key 'snippets' which contains the text.
    for x in raw_example_dataset.take(2):
      print(x['snippets'])

    # cell 19
    # Input pre-processing parameters
    SEQ_LENGTH = 20
    BATCH_SIZE = 8
    BUFFER_SIZE = 100  # For dataset shuffling

    # cell 20
    # Construct a lookup table to map string chars to indexes,
    # using the vocab loaded above:
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            keys=vocab, values=tf.constant(list(range(len(vocab))), dtype=tf.int64)
        ),
        default_value=0,
    )

    def to_ids(x):
      s = tf.reshape(x['snippets'], shape=[1])
      chars = tf.strings.bytes_split(s).values
      ids = table.lookup(chars)
      return ids

    def split_input_target(chunk):
      input_text = tf.map_fn(lambda x: x[:-1], chunk)
      target_text = tf.map_fn(lambda x: x[1:], chunk)
      return (input_text, target_text)

    def preprocess(dataset):
      return (
          # Map ASCII chars to int64 indexes using the vocab
          dataset.map(to_ids)
          # Split into individual chars
          .unbatch()
          # Form example sequences of SEQ_LENGTH +1
          .batch(SEQ_LENGTH + 1, drop_remainder=True)
          # Shuffle and form minibatches
          .shuffle(BUFFER_SIZE).batch(BATCH_SIZE, drop_remainder=True)
          # And finally split into (input, target) tuples,
          # each of length SEQ_LENGTH.
          .map(split_input_target)
      )

    # cell 22
    example_dataset = preprocess(raw_example_dataset)
    print(example_dataset.element_spec)

    # cell 26
    class FlattenedCategoricalAccuracy(tf.keras.metrics.SparseCategoricalAccuracy):

      def __init__(self, name='accuracy', dtype=tf.float32):
        super().__init__(name, dtype=dtype)

      def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.reshape(y_true, [-1, 1])
        y_pred = tf.reshape(y_pred, [-1, len(vocab), 1])
        return super().update_state(y_true, y_pred, sample_weight)

    # cell 28
    BATCH_SIZE = (
        8  # The training and eval batch size for the rest of this tutorial.
    )
    keras_model = load_model(batch_size=BATCH_SIZE)
    keras_model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[FlattenedCategoricalAccuracy()],
    )

    # Confirm that loss is much lower on Shakespeare than on random data
    loss, accuracy = keras_model.evaluate(example_dataset.take(5), verbose=0)
    print(
        'Evaluating on an example Shakespeare character: {a:3f}'.format(a=accuracy)
    )

    # As a sanity check, we can construct some completely random data, where we expect
    # the accuracy to be essentially random:
    random_guessed_accuracy = 1.0 / len(vocab)
    print(
        'Expected accuracy for random guessing: {a:.3f}'.format(
            a=random_guessed_accuracy
        )
    )
    random_indexes = np.random.randint(
        low=0, high=len(vocab), size=1 * BATCH_SIZE * (SEQ_LENGTH + 1)
    )
    data = collections.OrderedDict(
        snippets=tf.constant(''.join(np.array(vocab)[random_indexes]), shape=[1, 1])
    )
    random_dataset = preprocess(tf.data.Dataset.from_tensor_slices(data))
    loss, accuracy = keras_model.evaluate(random_dataset, steps=10, verbose=0)
    print('Evaluating on completely random data: {a:.3f}'.format(a=accuracy))

    # cell 31
    # Clone the keras_model inside `create_tff_model()`, which TFF will
    # call to produce a new copy of the model inside the graph that it will
    # serialize. Note: we want to construct all the necessary objects we'll need
    # _inside_ this method.
    def create_tff_model():
      # TFF uses an `input_spec` so it knows the types and shapes
      # that your model expects.
      input_spec = example_dataset.element_spec
      keras_model_clone = load_model(BATCH_SIZE)  # PATCHED: Keras 3.15 clone_model of a compiled model needs eager
      return tff.learning.models.from_keras_model(
          keras_model_clone,
          input_spec=input_spec,
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          metrics=[FlattenedCategoricalAccuracy()],
      )

    # cell 33
    # This command builds all the TensorFlow graphs and serializes them:
    fed_avg = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn=create_tff_model,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.5),
    )

    # cell 35
    state = fed_avg.initialize()
    result = fed_avg.next(state, [example_dataset.take(5)])
    state = result.state
    train_metrics = result.metrics['client_work']['train']
    print(
        'loss={l:.3f}, accuracy={a:.3f}'.format(
            l=train_metrics['loss'], a=train_metrics['accuracy']
        )
    )

    # cell 37
    def data(client, source=train_data):
      return preprocess(source.create_tf_dataset_for_client(client)).take(5)

    clients = [
        'ALL_S_WELL_THAT_ENDS_WELL_CELIA',
        'MUCH_ADO_ABOUT_NOTHING_OTHELLO',
    ]

    train_datasets = [data(client) for client in clients]

    # We concatenate the test datasets for evaluation with Keras by creating a
    # Dataset of Datasets, and then identity flat mapping across all the examples.
    test_dataset = tf.data.Dataset.from_tensor_slices(
        [data(client, test_data) for client in clients]
    ).flat_map(lambda x: x)

    # cell 39
    NUM_ROUNDS = 1

    # The state of the FL server, containing the model and optimization state.
    state = fed_avg.initialize()

    # Load our pre-trained Keras model weights into the global model state.
    pre_trained_weights = tff.learning.models.ModelWeights(
        trainable=[v.numpy() for v in keras_model.trainable_weights],
        non_trainable=[v.numpy() for v in keras_model.non_trainable_weights],
    )
    state = fed_avg.set_model_weights(state, pre_trained_weights)

    def keras_evaluate(state, round_num):
      # Take our global model weights and push them back into a Keras model to
      # use its standard `.evaluate()` method.
      keras_model = load_model(batch_size=BATCH_SIZE)
      keras_model.compile(
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          metrics=[FlattenedCategoricalAccuracy()],
      )
      model_weights = fed_avg.get_model_weights(state)
      model_weights.assign_weights_to(keras_model)
      loss, accuracy = keras_model.evaluate(example_dataset, steps=2, verbose=0)
      print('\tEval: loss={l:.3f}, accuracy={a:.3f}'.format(l=loss, a=accuracy))

    for round_num in range(NUM_ROUNDS):
      print('Round {r}'.format(r=round_num))
      keras_evaluate(state, round_num)
      result = fed_avg.next(state, train_datasets)
      state = result.state
      train_metrics = result.metrics['client_work']['train']
      print(
          '\tTrain: loss={l:.3f}, accuracy={a:.3f}'.format(
              l=train_metrics['loss'], a=train_metrics['accuracy']
          )
      )

    print('Final evaluation')
    keras_evaluate(state, NUM_ROUNDS + 1)


    # Checks (not in the tutorial).
    assert example_dataset.element_spec[0].shape.as_list() == [BATCH_SIZE, SEQ_LENGTH]
    assert set(train_metrics) >= {'loss', 'accuracy'}
    assert np.isfinite(train_metrics['loss'])
    weights = fed_avg.get_model_weights(state)
    assert len(weights.trainable) == len(keras_model.trainable_weights)
