"""TFF 0.88's ``docs/tutorials/federated_reconstruction_for_matrix_factorization.ipynb``, renamed.

MovieLens 1M (cell 9, a download) is replaced by `synthetic.movielens_like`,
which writes ``ratings.dat`` / ``movies.dat`` / ``users.dat`` in MovieLens'
format (40 users rating 30-40 of 40 movies, from a rank-2 matrix) under
pytest's ``tmp_path``; the tutorial's ``load_movielens_data`` reads them as
written. Shrunk: ``num_items`` 40 (tutorial: 3706, MovieLens' movie count), 4
clients per round (50), 8 rounds (20). Every other cell runs as written on the
default context. Left out: ``!pip`` and ``nest_asyncio``, the ``io`` /
``requests`` / ``zipfile`` / ``matplotlib`` imports, and the plots (cells 19,
21 and 30 keep their computations; 52 only plots).

Checks added at the end: the server holds the item embeddings only; the
metrics' names and order are TFF 0.88's (the notebook's recorded evaluation
outputs, from an older TFF, lack ``current_round_metrics`` /
``total_rounds_metrics``); the training and evaluation losses leave the
plateau of tiny initial embeddings; and, in closed form, the evaluation loss
with zero item embeddings is the mean squared rating of the odd-indexed
batches, a mean over batches (Keras' ``MeanMetricWrapper`` of a ``Loss``: one
value per batch, as in TFF), not over examples.
"""


def test_federated_reconstruction_for_matrix_factorization_tutorial(tmp_path):
    # cell 6
    import collections
    import functools
    import os
    from typing import List, Optional, Tuple

    import numpy as np
    import pandas as pd
    import tensorflow as tf
    import simharness as tff

    np.random.seed(42)

    # cell 9
    from tests.tff.tutorials import synthetic as synth
    synth.movielens_like(tmp_path)

    # cell 10
    def load_movielens_data(
        data_directory: str = "/tmp",
    ) -> Tuple[pd.DataFrame, pd.DataFrame]:
      """Loads pandas DataFrames for ratings, movies, users from data directory."""
      # Load pandas DataFrames from data directory. Assuming data is formatted as
      # specified in http://files.grouplens.org/datasets/movielens/ml-1m-README.txt.
      ratings_df = pd.read_csv(
          os.path.join(data_directory, "ml-1m", "ratings.dat"),
          sep="::",
          names=["UserID", "MovieID", "Rating", "Timestamp"], engine="python")
      movies_df = pd.read_csv(
          os.path.join(data_directory, "ml-1m", "movies.dat"),
          sep="::",
          names=["MovieID", "Title", "Genres"], engine="python",
          encoding = "ISO-8859-1")

      # Create dictionaries mapping from old IDs to new (remapped) IDs for both
      # MovieID and UserID. Use the movies and users present in ratings_df to
      # determine the mapping, since movies and users without ratings are unneeded.
      movie_mapping = {
          old_movie: new_movie for new_movie, old_movie in enumerate(
              ratings_df.MovieID.astype("category").cat.categories)
      }
      user_mapping = {
          old_user: new_user for new_user, old_user in enumerate(
              ratings_df.UserID.astype("category").cat.categories)
      }

      # Map each DataFrame consistently using the now-fixed mapping.
      ratings_df.MovieID = ratings_df.MovieID.map(movie_mapping)
      ratings_df.UserID = ratings_df.UserID.map(user_mapping)
      movies_df.MovieID = movies_df.MovieID.map(movie_mapping)

      # Remove nulls resulting from some movies being in movies_df but not
      # ratings_df.
      movies_df = movies_df[pd.notnull(movies_df.MovieID)]

      return ratings_df, movies_df

    # cell 12
    ratings_df, movies_df = load_movielens_data(str(tmp_path))

    # cells 14, 16
    print(ratings_df.head())
    print(movies_df.head())

    # cell 18
    print('Num users:', len(set(ratings_df.UserID)))
    print('Num movies:', len(set(ratings_df.MovieID)))

    # cell 19 (without the histogram)
    ratings = ratings_df.Rating.tolist()
    print('Average rating:', np.mean(ratings))
    print('Median rating:', np.median(ratings))

    # cell 21 (without the pie chart)
    movie_genres_list = movies_df.Genres.tolist()
    # Count the number of times each genre describes a movie.
    genre_count = collections.defaultdict(int)
    for genres in movie_genres_list:
      curr_genres_list = genres.split('|')
      for genre in curr_genres_list:
        genre_count[genre] += 1
    genre_name_list, genre_count_list = zip(*genre_count.items())

    # cell 23
    def print_top_genres_for_user(ratings_df, movies_df, user_id):
      """Prints top movie genres for user with ID user_id."""
      user_ratings_df = ratings_df[ratings_df.UserID == user_id]
      movie_ids = user_ratings_df.MovieID

      genre_count = collections.Counter()
      for movie_id in movie_ids:
        genres_string = movies_df[movies_df.MovieID == movie_id].Genres.tolist()[0]
        for genre in genres_string.split('|'):
          genre_count[genre] += 1

      print(f'\nFor user {user_id}:')
      for (genre, freq) in genre_count.most_common(5):
        print(f'{genre} was rated {freq} times')

    print_top_genres_for_user(ratings_df, movies_df, user_id=0)
    print_top_genres_for_user(ratings_df, movies_df, user_id=10)
    print_top_genres_for_user(ratings_df, movies_df, user_id=19)

    # cell 25
    def create_tf_datasets(ratings_df: pd.DataFrame,
                           batch_size: int = 1,
                           max_examples_per_user: Optional[int] = None,
                           max_clients: Optional[int] = None) -> List[tf.data.Dataset]:
      """Creates TF Datasets containing the movies and ratings for all users."""
      num_users = len(set(ratings_df.UserID))
      # Optionally limit to `max_clients` to speed up data loading.
      if max_clients is not None:
        num_users = min(num_users, max_clients)

      def rating_batch_map_fn(rating_batch):
        """Maps a rating batch to an OrderedDict with tensor values."""
        # Each example looks like: {x: movie_id, y: rating}.
        # We won't need the UserID since each client will only look at their own
        # data.
        return collections.OrderedDict([
            ("x", tf.cast(rating_batch[:, 1:2], tf.int64)),
            ("y", tf.cast(rating_batch[:, 2:3], tf.float32))
        ])

      tf_datasets = []
      for user_id in range(num_users):
        # Get subset of ratings_df belonging to a particular user.
        user_ratings_df = ratings_df[ratings_df.UserID == user_id]

        tf_dataset = tf.data.Dataset.from_tensor_slices(user_ratings_df)

        # Define preprocessing operations.
        tf_dataset = tf_dataset.take(max_examples_per_user).shuffle(
            buffer_size=max_examples_per_user, seed=42).batch(batch_size).map(
            rating_batch_map_fn,
            num_parallel_calls=tf.data.experimental.AUTOTUNE)
        tf_datasets.append(tf_dataset)

      return tf_datasets


    def split_tf_datasets(
        tf_datasets: List[tf.data.Dataset],
        train_fraction: float = 0.8,
        val_fraction: float = 0.1,
    ) -> Tuple[List[tf.data.Dataset], List[tf.data.Dataset], List[tf.data.Dataset]]:
      """Splits a list of user TF datasets into train/val/test by user.
      """
      np.random.seed(42)
      np.random.shuffle(tf_datasets)

      train_idx = int(len(tf_datasets) * train_fraction)
      val_idx = int(len(tf_datasets) * (train_fraction + val_fraction))

      # Note that the val and test data contains completely different users, not
      # just unseen ratings from train users.
      return (tf_datasets[:train_idx], tf_datasets[train_idx:val_idx],
              tf_datasets[val_idx:])

    # cell 26
    # We limit the number of clients to speed up dataset creation. Feel free to pass
    # max_clients=None to load all clients' data.
    tf_datasets = create_tf_datasets(
        ratings_df=ratings_df,
        batch_size=5,
        max_examples_per_user=300,
        max_clients=2000)

    # Split the ratings into training/val/test by client.
    tf_train_datasets, tf_val_datasets, tf_test_datasets = split_tf_datasets(
        tf_datasets,
        train_fraction=0.8,
        val_fraction=0.1)

    # cell 28
    print(next(iter(tf_train_datasets[0])))

    # cell 30 (without the histogram)
    def count_examples(curr_count, batch):
      return curr_count + tf.size(batch['x'])

    num_examples_list = []
    # Compute number of examples for every other user.
    for i in range(0, len(tf_train_datasets), 2):
      num_examples = tf_train_datasets[i].reduce(tf.constant(0), count_examples).numpy()
      num_examples_list.append(num_examples)

    # cell 34
    class UserEmbedding(tf.keras.layers.Layer):
      """Keras layer representing an embedding for a single user, used below."""

      def __init__(self, num_latent_factors, **kwargs):
        super().__init__(**kwargs)
        self.num_latent_factors = num_latent_factors

      def build(self, input_shape):
        self.embedding = self.add_weight(
            shape=(1, self.num_latent_factors),
            initializer='uniform',
            dtype=tf.float32,
            name='UserEmbeddingKernel')
        super().build(input_shape)

      def call(self, inputs):
        return self.embedding

      def compute_output_shape(self):
        return (1, self.num_latent_factors)


    def get_matrix_factorization_model(
        num_items: int,
        num_latent_factors: int) -> tff.learning.models.ReconstructionModel:
      """Defines a Keras matrix factorization model."""
      # Layers with variables will be partitioned into global and local layers.
      # We'll pass this to `tff.learning.models.ReconstructionModel.from_keras_model_and_layers`.
      global_layers = []
      local_layers = []

      # Extract the item embedding.
      item_input = tf.keras.layers.Input(shape=[1], name='Item')
      item_embedding_layer = tf.keras.layers.Embedding(
          num_items,
          num_latent_factors,
          name='ItemEmbedding')
      global_layers.append(item_embedding_layer)
      flat_item_vec = tf.keras.layers.Flatten(name='FlattenItems')(
          item_embedding_layer(item_input))

      # Extract the user embedding.
      user_embedding_layer = UserEmbedding(
          num_latent_factors,
          name='UserEmbedding')
      local_layers.append(user_embedding_layer)

      # The item_input never gets used by the user embedding layer,
      # but this allows the model to directly use the user embedding.
      flat_user_vec = user_embedding_layer(item_input)

      # Compute the dot product between the user embedding, and the item one.
      pred = tf.keras.layers.Dot(
          1, normalize=False, name='Dot')([flat_user_vec, flat_item_vec])

      input_spec = collections.OrderedDict(
          x=tf.TensorSpec(shape=[None, 1], dtype=tf.int64),
          y=tf.TensorSpec(shape=[None, 1], dtype=tf.float32))

      model = tf.keras.Model(inputs=item_input, outputs=pred)

      return tff.learning.models.ReconstructionModel.from_keras_model_and_layers(
          keras_model=model,
          global_layers=global_layers,
          local_layers=local_layers,
          input_spec=input_spec)

    # cell 36
    # This will be used to produce our training process.
    # User and item embeddings will be 50-dimensional.
    model_fn = functools.partial(
        get_matrix_factorization_model,
        num_items=40,
        num_latent_factors=50)

    # cell 38
    class RatingAccuracy(tf.keras.metrics.Mean):
      """Keras metric computing accuracy of reconstructed ratings."""

      def __init__(self,
                   name: str = 'rating_accuracy',
                   **kwargs):
        super().__init__(name=name, **kwargs)

      def update_state(self,
                       y_true: tf.Tensor,
                       y_pred: tf.Tensor,
                       sample_weight: Optional[tf.Tensor] = None):
        absolute_diffs = tf.abs(y_true - y_pred)
        # A [batch_size, 1] tf.bool tensor indicating correctness within the
        # threshold for each example in a batch. A 0.5 threshold corresponds
        # to correctness when predictions are rounded to the nearest whole
        # number.
        example_accuracies = tf.less_equal(absolute_diffs, 0.5)
        super().update_state(example_accuracies, sample_weight=sample_weight)


    loss_fn = lambda: tf.keras.losses.MeanSquaredError()
    metrics_fn = lambda: [RatingAccuracy()]

    # cell 40
    # We'll use this by doing:
    # state = training_process.initialize()
    # state, metrics = training_process.next(state, federated_train_data)
    training_process = tff.learning.algorithms.build_fed_recon(
        model_fn=model_fn,
        loss_fn=loss_fn,
        metrics_fn=metrics_fn,
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
        reconstruction_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))

    # cell 42
    evaluation_process = tff.learning.algorithms.build_fed_recon_eval(
        model_fn,
        loss_fn=loss_fn,
        metrics_fn=metrics_fn,
        reconstruction_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))

    # cell 44
    state = training_process.initialize()
    model = training_process.get_model_weights(state)
    print(model)
    print('Item variables shape:', model.trainable[0].shape)

    # cell 46
    # We shouldn't expect good evaluation results here, since we haven't trained
    # yet!
    eval_state = evaluation_process.initialize()
    eval_state = evaluation_process.set_model_weights(
      eval_state, training_process.get_model_weights(state)
    )
    _, eval_metrics = evaluation_process.next(eval_state, tf_val_datasets)
    print('Initial Eval:', eval_metrics['client_work']['eval'])
    initial_eval = eval_metrics['client_work']['eval']

    # cell 48
    federated_train_data = np.random.choice(tf_train_datasets, size=4, replace=False).tolist()
    state, metrics = training_process.next(state, federated_train_data)
    print(f'Train metrics:', metrics['client_work']['train'])  # noqa: F541 (as written)

    # cell 50
    NUM_ROUNDS = 8

    train_losses = []
    train_accs = []

    state = training_process.initialize()

    # This may take a couple minutes to run.
    for i in range(NUM_ROUNDS):
      federated_train_data = np.random.choice(tf_train_datasets, size=4, replace=False).tolist()
      state, metrics = training_process.next(state, federated_train_data)
      print(f'Train round {i}:', metrics['client_work']['train'])
      train_losses.append(metrics['client_work']['train']['loss'])
      train_accs.append(metrics['client_work']['train']['rating_accuracy'])


    eval_state = evaluation_process.set_model_weights(
      eval_state, training_process.get_model_weights(state))
    _, eval_metrics = evaluation_process.next(eval_state, tf_val_datasets)
    print('Final Eval:', eval_metrics['client_work']['eval'])
    final_eval = eval_metrics['client_work']['eval']

    # cell 54
    eval_state = evaluation_process.set_model_weights(
        eval_state, training_process.get_model_weights(state)
    )
    _, eval_metrics = evaluation_process.next(eval_state, tf_test_datasets)
    print('Final Test:', eval_metrics['client_work']['eval'])

    # Checks (not in the tutorial). The server holds the item embeddings only (the
    # user embedding is local), as the tutorial's recorded output shows.
    weights = training_process.get_model_weights(state)
    assert [w.shape for w in weights.trainable] == [(40, 50)]
    assert list(weights.non_trainable) == []
    # The metrics in the order of the recorded outputs; finite; the returned eval
    # state is dropped, so the totals are this round's.
    assert list(metrics['client_work']['train']) == ['rating_accuracy', 'loss']
    for result in (initial_eval, final_eval, eval_metrics['client_work']['eval']):
      assert list(result) == ['current_round_metrics', 'total_rounds_metrics']
      assert list(result['current_round_metrics']) == ['rating_accuracy', 'loss']
      assert result['current_round_metrics'] == result['total_rounds_metrics']
      assert all(np.isfinite(v) for v in result['current_round_metrics'].values())
    # Training leaves the plateau of tiny embeddings (predictions near 0, loss near
    # the mean squared rating), on the training clients and on the unseen ones.
    assert train_losses[-1] < 0.6 * train_losses[0], train_losses
    assert final_eval['current_round_metrics']['loss'] < (
        0.6 * initial_eval['current_round_metrics']['loss'])
    assert train_accs[-1] > 0.0
    # In closed form: with zero item embeddings every prediction is 0 whatever the
    # reconstructed user embedding, so the evaluation loss is the mean squared rating
    # over the odd-indexed batches (the default split evaluates on those). Keras'
    # `MeanMetricWrapper` of a `Loss` gets one value per batch: the mean is over the
    # batches of all clients, a short last batch counting as much as a full one (as
    # in TFF). No rating is within 0.5 of 0.
    zero_state = evaluation_process.set_model_weights(
        evaluation_process.initialize(),
        tff.learning.models.ModelWeights(
            trainable=[np.zeros((40, 50), np.float32)], non_trainable=[]))
    users = [ratings_df[ratings_df.UserID == u] for u in range(3)]
    datasets = [
        tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
            x=u.MovieID.to_numpy()[:, None], y=u.Rating.to_numpy(np.float32)[:, None]
        )).batch(5)
        for u in users]
    batches = [
        np.array_split(u.Rating.to_numpy(np.float64), range(5, len(u), 5))[1::2]
        for u in users]
    batch_losses = [np.mean(b ** 2) for user_batches in batches for b in user_batches]
    assert len({b.size for user_batches in batches for b in user_batches}) > 1  # a short one
    _, zero_metrics = evaluation_process.next(zero_state, datasets)
    zero_eval = zero_metrics['client_work']['eval']['current_round_metrics']
    np.testing.assert_allclose(zero_eval['loss'], np.mean(batch_losses), rtol=1e-5)
    assert zero_eval['rating_accuracy'] == 0.0
