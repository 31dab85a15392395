"""Port of TFF's ``tensorflow_federated/python/learning/templates/type_checks_test.py``.

No case left out.
"""

import numpy as np
import pytest

import simharness as tff
from simharness.learning.templates import type_checks

SEQ_INT = tff.SequenceType(np.int32)
SEQ_FLOAT = tff.SequenceType(np.float32)


@pytest.mark.parametrize(
    'member',
    [SEQ_INT, tff.StructType([SEQ_INT, SEQ_FLOAT], container=list)],
    ids=['sequence', 'struct_of_sequences'],
)
def test_does_not_raise_on_client_placed(member):
    type_checks.check_is_client_placed_structure_of_sequences(
        tff.FederatedType(member, tff.CLIENTS)
    )


@pytest.mark.parametrize(
    'type_spec',
    [
        tff.FederatedType(SEQ_INT, tff.SERVER),
        tff.FederatedType(tff.StructType([SEQ_INT, SEQ_FLOAT], container=list), tff.SERVER),
        tff.FederatedType(tff.TensorType(np.int32, (1, 2)), tff.CLIENTS),
        tff.FederatedType(
            tff.StructType([tff.TensorType(np.int32, (1, 2)), SEQ_INT], container=list), tff.CLIENTS
        ),
        tff.StructType(
            [
                (None, tff.FederatedType(SEQ_INT, tff.CLIENTS)),
                (None, tff.FederatedType(SEQ_INT, tff.CLIENTS)),
            ]
        ),
    ],
    ids=[
        'server_placed_sequence',
        'server_placed_struct_of_sequences',
        'client_placed_tensor',
        'client_placed_structure_of_tensor_and_sequence',
        'structure_of_client_placed_sequences',
    ],
)
def test_raises(type_spec):
    with pytest.raises(type_checks.ClientSequenceTypeError):
        type_checks.check_is_client_placed_structure_of_sequences(type_spec)
