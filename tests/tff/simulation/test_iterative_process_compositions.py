"""Port of TFF's ``tensorflow_federated/python/simulation/iterative_process_compositions_test.py``.

No case left out. Added: the composed processes run (datasets built from ids
where each client runs) on every stack of `tff_stack`.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.templates import learning_process
from simharness.simulation import iterative_process_compositions as ipc
from simharness.templates import IterativeProcess

INT64_SEQ_AT_CLIENTS = tff.FederatedType(tff.SequenceType(np.int64), tff.CLIENTS)


def _create_whimsy_iterative_process():
    @tff.tf_computation()
    def init():
        return []

    @tff.tf_computation(init.type_signature.result)
    def next_fn(x):
        return x

    return IterativeProcess(initialize_fn=init, next_fn=next_fn)


def _create_federated_int_dataset_identity_iterative_process():
    @tff.tf_computation()
    def create_dataset():
        return tf.data.Dataset.range(5)

    @tff.federated_computation()
    def init():
        return tff.federated_eval(create_dataset, tff.CLIENTS)

    @tff.federated_computation(init.type_signature.result)
    def next_fn(x):
        return x

    return IterativeProcess(initialize_fn=init, next_fn=next_fn)


def _create_stateless_int_dataset_reduction_iterative_process():
    @tff.tf_computation()
    def make_zero():
        return tf.cast(0, tf.int64)

    @tff.federated_computation()
    def init():
        return tff.federated_eval(make_zero, tff.SERVER)

    @tff.tf_computation(tff.SequenceType(np.int64))
    def reduce_dataset(x):
        return x.reduce(tf.cast(0, tf.int64), lambda x, y: x + y)

    @tff.federated_computation((init.type_signature.result, INT64_SEQ_AT_CLIENTS))
    def next_fn(server_state, client_data):
        del server_state
        return tff.federated_sum(tff.federated_map(reduce_dataset, client_data))

    return IterativeProcess(initialize_fn=init, next_fn=next_fn)


def _create_stateless_int_vector_unknown_dim_dataset_reduction_iterative_process():
    @tff.tf_computation()
    def make_zero():
        return tf.reshape(tf.cast(0, tf.int64), shape=[1])

    @tff.federated_computation()
    def init():
        return tff.federated_eval(make_zero, tff.SERVER)

    @tff.tf_computation(tff.SequenceType(tff.TensorType(np.int64, shape=[None])))
    def reduce_dataset(x):
        return x.reduce(tf.cast(tf.constant([0]), tf.int64), lambda x, y: x + tf.reduce_sum(y))

    @tff.federated_computation(
        tff.FederatedType(tff.TensorType(np.int64, shape=[None]), tff.SERVER),
        tff.FederatedType(tff.SequenceType(tff.TensorType(np.int64, shape=[None])), tff.CLIENTS),
    )
    def next_fn(server_state, client_data):
        del server_state
        return tff.federated_sum(tff.federated_map(reduce_dataset, client_data))

    return IterativeProcess(initialize_fn=init, next_fn=next_fn)


@tff.tf_computation(np.str_)
def int_dataset_computation(x):
    del x
    return tf.data.Dataset.range(5)


@tff.tf_computation(np.str_)
def vector_int_dataset_computation(x):
    del x
    return tf.data.Dataset.range(5).map(lambda x: tf.reshape(x, shape=[1]))


@tff.tf_computation(np.str_)
def float_dataset_computation(x):
    del x
    return tf.data.Dataset.range(5, output_type=tf.float32)


@tff.tf_computation(np.int32)
def int_identity(x):
    return x


@tff.federated_computation(np.int32, INT64_SEQ_AT_CLIENTS, np.float32)
def int64_sequence_struct_computation(a, dataset, b):
    return a, dataset, b


@tff.federated_computation(
    np.int32, tff.StructType([np.int64, INT64_SEQ_AT_CLIENTS, np.float64]), np.float32
)
def int64_sequence_nested_struct_computation(a, dataset, b):
    return a, dataset, b


@tff.federated_computation(tff.StructType([INT64_SEQ_AT_CLIENTS]), INT64_SEQ_AT_CLIENTS)
def int64_sequence_multiple_matching_federated_types_computation(a, b):
    return a, b


@tff.federated_computation(INT64_SEQ_AT_CLIENTS)
def int64_sequence_computation(dataset):
    del dataset
    return tff.federated_value(5, tff.SERVER)


class TestConstructDatasetsOnClientsComputation:
    def test_raises_non_computation_dataset_comp(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_computation(
                lambda _: [], int64_sequence_struct_computation
            )

    def test_raises_non_computation_outer_comp(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_computation(int_dataset_computation, lambda x: x)

    def test_raises_computation_not_returning_dataset(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_computation(
                int_identity, int64_sequence_struct_computation
            )

    def test_raises_computation_no_dataset_parameter(self):
        no_dataset_comp = tff.federated_computation(lambda x: x, [np.int32])
        with pytest.raises(ipc.SequenceTypeNotFoundError):
            ipc.compose_dataset_computation_with_computation(
                int_dataset_computation, no_dataset_comp
            )

    def test_raises_mismatched_dataset_comp_return_type_and_sequence_type(self):
        with pytest.raises(ipc.SequenceTypeNotAssignableError):
            ipc.compose_dataset_computation_with_computation(
                float_dataset_computation, int64_sequence_struct_computation
            )

    def test_mutates_comp_accepting_only_dataset(self):
        expected = tff.FunctionType(
            tff.FederatedType(np.str_, tff.CLIENTS), tff.FederatedType(np.int32, tff.SERVER)
        )
        new_comp = ipc.compose_dataset_computation_with_computation(
            int_dataset_computation, int64_sequence_computation
        )
        assert expected.is_equivalent_to(new_comp.type_signature)

    def test_mutates_comp_accepting_dataset_in_second_index(self):
        expected = tff.FunctionType(
            collections.OrderedDict(
                a=np.int32, dataset=tff.FederatedType(np.str_, tff.CLIENTS), b=np.float32
            ),
            (np.int32, INT64_SEQ_AT_CLIENTS, np.float32),
        )
        new_comp = ipc.compose_dataset_computation_with_computation(
            int_dataset_computation, int64_sequence_struct_computation
        )
        assert expected.is_equivalent_to(new_comp.type_signature)

    def test_raises_computation_with_multiple_federated_types(self):
        with pytest.raises(ipc.MultipleMatchingSequenceTypesError):
            ipc.compose_dataset_computation_with_computation(
                int_dataset_computation,
                int64_sequence_multiple_matching_federated_types_computation,
            )

    def test_mutates_comp_accepting_deeply_nested_dataset(self):
        expected = tff.FunctionType(
            collections.OrderedDict(
                a=np.int32,
                dataset=tff.StructType(
                    [np.int64, tff.FederatedType(np.str_, tff.CLIENTS), np.float64]
                ),
                b=np.float32,
            ),
            int64_sequence_nested_struct_computation.type_signature.result,
        )
        new_comp = ipc.compose_dataset_computation_with_computation(
            int_dataset_computation, int64_sequence_nested_struct_computation
        )
        assert expected.is_equivalent_to(new_comp.type_signature)


class TestConstructDatasetsOnClientsIterativeProcess:
    def test_raises_non_computation(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_iterative_process(
                lambda _: [], _create_federated_int_dataset_identity_iterative_process()
            )

    def test_raises_non_iterative_process(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_iterative_process(
                int_dataset_computation, lambda x: x
            )

    def test_raises_computation_not_returning_dataset(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_iterative_process(
                int_identity, _create_federated_int_dataset_identity_iterative_process()
            )

    def test_raises_iterative_process_no_dataset_parameter(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_iterative_process(
                int_dataset_computation, _create_whimsy_iterative_process()
            )

    def test_raises_mismatched_dataset_comp_return_type_and_iterproc_sequence_type(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_iterative_process(
                float_dataset_computation,
                _create_federated_int_dataset_identity_iterative_process(),
            )

    def test_raises_iterproc_if_dataset_is_returned_by_init(self):
        with pytest.raises(TypeError):
            ipc.compose_dataset_computation_with_iterative_process(
                int_dataset_computation, _create_federated_int_dataset_identity_iterative_process()
            )

    def test_mutates_iterproc_accepting_dataset_in_second_index_of_next(self):
        iterproc = _create_stateless_int_dataset_reduction_iterative_process()
        expected = tff.FunctionType(
            collections.OrderedDict(
                server_state=tff.FederatedType(np.int64, tff.SERVER),
                client_data=tff.FederatedType(np.str_, tff.CLIENTS),
            ),
            tff.FederatedType(np.int64, tff.SERVER),
        )
        new = ipc.compose_dataset_computation_with_iterative_process(
            int_dataset_computation, iterproc
        )
        assert expected.is_equivalent_to(new.next.type_signature)

    def test_mutates_iterproc_with_parameter_assignable_from_result(self):
        iterproc = _create_stateless_int_vector_unknown_dim_dataset_reduction_iterative_process()
        expected = tff.FunctionType(
            collections.OrderedDict(
                server_state=tff.FederatedType(tff.TensorType(np.int64, shape=[None]), tff.SERVER),
                client_data=tff.FederatedType(np.str_, tff.CLIENTS),
            ),
            tff.FederatedType(tff.TensorType(np.int64, shape=[1]), tff.SERVER),
        )
        new = ipc.compose_dataset_computation_with_iterative_process(
            vector_int_dataset_computation, iterproc
        )
        assert expected.is_equivalent_to(new.next.type_signature)

    def test_returns_iterproc_accepting_dataset_in_third_index_of_next(self):
        iterproc = _create_stateless_int_dataset_reduction_iterative_process()
        old = iterproc.next.type_signature.parameter

        @tff.federated_computation(tff.StructType([old[0], np.int32, old[1]]))
        def new_next(param):
            return iterproc.next([param[0], param[2]])

        with_third = IterativeProcess(iterproc.initialize, new_next)
        expected = tff.FunctionType(
            [
                tff.FederatedType(np.int64, tff.SERVER),
                np.int32,
                tff.FederatedType(np.str_, tff.CLIENTS),
            ],
            tff.FederatedType(np.int64, tff.SERVER),
        )
        new = ipc.compose_dataset_computation_with_iterative_process(
            int_dataset_computation, with_third
        )
        assert expected.is_equivalent_to(new.next.type_signature)


def test_learning_process_keeps_non_next_type_signatures():
    @tff.tf_computation()
    def make_zero():
        return tf.cast(0, tf.int64)

    @tff.federated_computation()
    def initialize_fn():
        return tff.federated_eval(make_zero, tff.SERVER)

    @tff.federated_computation((initialize_fn.type_signature.result, INT64_SEQ_AT_CLIENTS))
    def next_fn(server_state, client_data):
        del client_data
        return learning_process.LearningProcessOutput(
            state=server_state, metrics=tff.federated_value((), tff.SERVER)
        )

    @tff.tf_computation(np.int64)
    def get_model_weights(server_state):
        return server_state + 1

    @tff.tf_computation(np.int64, np.int64)
    def set_model_weights(state, state_update):
        return state + state_update

    process = learning_process.LearningProcess(
        initialize_fn=initialize_fn,
        next_fn=next_fn,
        get_model_weights=get_model_weights,
        set_model_weights=set_model_weights,
    )
    new_process = ipc.compose_dataset_computation_with_learning_process(
        int_dataset_computation, process
    )
    assert isinstance(new_process, IterativeProcess)
    assert new_process.get_model_weights.type_signature.is_equivalent_to(
        process.get_model_weights.type_signature
    )
    assert new_process.set_model_weights.type_signature.is_equivalent_to(
        process.set_model_weights.type_signature
    )


def test_composed_processes_run(tff_stack):
    iterproc = _create_stateless_int_dataset_reduction_iterative_process()
    new = ipc.compose_dataset_computation_with_iterative_process(int_dataset_computation, iterproc)
    assert int(new.next(new.initialize(), ['a', 'b', 'c'])) == 30

    old = iterproc.next.type_signature.parameter

    @tff.federated_computation(tff.StructType([old[0], np.int32, old[1]]))
    def third_next(param):
        return iterproc.next([param[0], param[2]])

    third = ipc.compose_dataset_computation_with_iterative_process(
        int_dataset_computation, IterativeProcess(iterproc.initialize, third_next)
    )
    assert int(third.next(third.initialize(), 7, ['a', 'b'])) == 20
    nested = ipc.compose_dataset_computation_with_computation(
        int_dataset_computation, int64_sequence_nested_struct_computation
    )
    a, (x, datasets, y), b = nested(1, (np.int64(2), ['p', 'q'], 3.0), np.float32(4.0))
    assert (int(a), int(x), float(y), float(b)) == (1, 2, 3.0, 4.0)
    assert [list(map(int, d)) for d in datasets] == [[0, 1, 2, 3, 4]] * 2
