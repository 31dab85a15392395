"""Port of TFF's ``tensorflow_federated/python/learning/templates/hparams_base_test.py``.

No case left out.
"""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.learning.templates import hparams_base

STATE_TYPE = tff.TensorType(np.int32)
HPARAMS_A_INT = tff.to_type(collections.OrderedDict(a=np.int32))


def test_get_hparams_with_compatible_state_type_does_not_raise():
    @tff.tf_computation(np.int32)
    def get_hparams_fn(state):
        return collections.OrderedDict(a=state)

    hparams_base.type_check_get_hparams_fn(get_hparams_fn, STATE_TYPE)


def test_get_hparams_with_incompatible_state_type():
    @tff.tf_computation(np.float32)
    def get_hparams_fn(state):
        return collections.OrderedDict(a=state)

    with pytest.raises(hparams_base.GetHparamsTypeError):
        hparams_base.type_check_get_hparams_fn(get_hparams_fn, STATE_TYPE)


def test_set_hparams_fn_with_one_input_arg_raises():
    @tff.tf_computation(np.int32)
    def set_hparams_fn(state):
        return state

    with pytest.raises(hparams_base.SetHparamsTypeError):
        hparams_base.type_check_set_hparams_fn(set_hparams_fn, STATE_TYPE)


def test_set_hparams_fn_with_three_input_args_raises():
    @tff.tf_computation(np.int32, np.int32, np.int32)
    def set_hparams_fn(state, x, y):
        del x, y
        return state

    with pytest.raises(hparams_base.SetHparamsTypeError):
        hparams_base.type_check_set_hparams_fn(set_hparams_fn, STATE_TYPE)


def test_set_hparams_fn_with_compatible_state_type_does_not_raise():
    @tff.tf_computation(np.int32, HPARAMS_A_INT)
    def set_hparams_fn(state, hparams):
        del state
        return hparams['a']

    hparams_base.type_check_set_hparams_fn(set_hparams_fn, STATE_TYPE)


def test_set_hparams_fn_with_incompatible_input_state_type_raises():
    @tff.tf_computation(np.float32, HPARAMS_A_INT)
    def set_hparams_fn(state, hparams):
        del state
        return hparams['a']

    with pytest.raises(hparams_base.SetHparamsTypeError):
        hparams_base.type_check_set_hparams_fn(set_hparams_fn, STATE_TYPE)


def test_set_hparams_fn_with_incompatible_outputput_state_type_raises():
    @tff.tf_computation(np.int32, tff.to_type(collections.OrderedDict(a=np.float32)))
    def set_hparams_fn(state, hparams):
        del state
        return hparams['a']

    with pytest.raises(hparams_base.SetHparamsTypeError):
        hparams_base.type_check_set_hparams_fn(set_hparams_fn, STATE_TYPE)


def test_default_get_hparams_returns_empty_dict():
    get_hparams_fn = hparams_base.build_basic_hparams_getter(STATE_TYPE)
    expected = tff.FunctionType(STATE_TYPE, tff.to_type(collections.OrderedDict()))
    assert get_hparams_fn.type_signature.is_equivalent_to(expected)


def test_default_set_hparams_returns_state_of_matching_type():
    hparams_type = tff.to_type(collections.OrderedDict(a=np.float32))
    set_hparams_fn = hparams_base.build_basic_hparams_setter(STATE_TYPE, hparams_type)
    expected = tff.FunctionType(
        tff.StructType([('state', STATE_TYPE), ('hparams', hparams_type)]), STATE_TYPE
    )
    assert set_hparams_fn.type_signature.is_equivalent_to(expected)
