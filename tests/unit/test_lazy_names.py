"""`simharness.lazy_names.LazyNames`: the lazy packages' names, as TFF's packages list them."""

from __future__ import annotations

import pytest

import simharness as tff

#: ``[n for n in dir(tff.learning.templates) if not n.startswith('_')]`` under TFF 0.87.0.
TFF_087_TEMPLATES = [
    'ClientResult', 'ClientWorkProcess', 'DistributionProcess', 'FinalizerProcess',
    'LearningAlgorithmState', 'LearningProcess', 'LearningProcessOutput',
    'apply_optimizer_finalizer', 'build_apply_optimizer_finalizer', 'build_broadcast_process',
    'build_functional_model_delta_client_work', 'build_model_delta_client_work',
    'client_works', 'compose_learning_process', 'composers', 'distributors', 'finalizers',
    'hparams_base', 'learning_process', 'model_delta_client_work', 'proximal_client_work',
    'reject_non_finite_update', 'type_checks',
]  # fmt: skip
#: The same of ``tff.learning.algorithms`` under TFF 0.87.0.
TFF_087_ALGORITHMS = [
    'build_fed_eval', 'build_fed_kmeans', 'build_fed_recon', 'build_fed_recon_eval',
    'build_fed_sgd', 'build_mime_lite_with_optimizer_schedule',
    'build_personalization_eval_computation', 'build_unweighted_fed_avg',
    'build_unweighted_fed_prox', 'build_unweighted_mime_lite', 'build_weighted_fed_avg',
    'build_weighted_fed_avg_with_optimizer_schedule', 'build_weighted_fed_prox',
    'build_weighted_mime_lite', 'fed_avg', 'fed_avg_with_optimizer_schedule', 'fed_eval',
    'fed_prox', 'fed_recon', 'fed_recon_eval', 'fed_sgd', 'kmeans_clustering', 'mime',
    'personalization_eval',
]  # fmt: skip


def _public(module):
    return [n for n in dir(module) if not n.startswith('_')]


def test_dir_lists_tff_s_names_and_submodules_and_nothing_imported_for_itself():
    assert _public(tff.learning.templates) == TFF_087_TEMPLATES
    assert set(TFF_087_ALGORITHMS) <= set(_public(tff.learning.algorithms))
    for package in (tff.learning, tff.learning.algorithms, tff.program, tff.analytics):
        names = dir(package)
        assert not {'Any', 'LazyNames', 'importlib', '_WHERE', '_LAZY'} & set(names), package
        assert set(package.__all__) <= set(names)
    assert 'models' in dir(tff.learning) and 'heavy_hitters' in dir(tff.analytics)


def test_a_name_loads_once_an_alias_is_reachable_and_an_unknown_name_is_python_s_error():
    from simharness.learning.templates import composers

    assert tff.learning.templates.compose_learning_process is composers.compose_learning_process
    assert 'compose_learning_process' in vars(tff.learning.templates)  # kept: a plain lookup next
    assert tff.learning.templates.composers is composers
    assert tff.learning.Model is tff.learning.models.VariableModel  # TFF 0.48-0.52's name
    assert 'Model' not in dir(tff.learning)
    assert tff.analytics.IbltFactory.__module__.endswith('heavy_hitters.iblt.iblt_factory')
    with pytest.raises(
        AttributeError, match="module 'simharness.learning.algorithms' has no attribute 'nope'"
    ):
        tff.learning.algorithms.nope  # noqa: B018
