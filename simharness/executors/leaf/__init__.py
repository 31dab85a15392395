"""The leaf executor (`eager_tf.EagerTFExecutor`) and what it runs on: embedded TF
functions (`embedded_function`), values and datasets (`tf_values`, `tensor_sequences`),
blocks of clients (`client_blocks`), clients' sequences and the sequence intrinsics
(`eager_sequences`), loops over sequences lowered to tensor loops
(`sequence_lowering`), reductions (`eager_reductions`) and the stream plans a worker
evaluates (`stream_eval`)."""
