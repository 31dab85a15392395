"""Federated learning algorithms (``tff.learning.algorithms``), TFF 0.88's builders.

```
build_weighted_fed_avg(model_fn, client_optimizer_fn, server_optimizer_fn=SGD(1.0), *,
                       client_weighting=NUM_EXAMPLES, model_distributor=None,
                       model_aggregator=None, metrics_aggregator=None, loop_implementation=...)
build_unweighted_fed_avg(...)        build_weighted_fed_prox / build_unweighted_fed_prox(...)
build_fed_sgd(model_fn, server_optimizer_fn=SGD(0.1), ...)
build_fed_eval(model_fn, model_distributor=None, metrics_aggregation_process=None, ...)
build_fed_recon(model_fn, *, loss_fn, metrics_fn=None, server_optimizer_fn=SGD(1.0),
                client_optimizer_fn=SGD(0.1), reconstruction_optimizer_fn=SGD(0.1), ...)
build_fed_recon_eval(model_fn, *, loss_fn, metrics_fn=None,
                     reconstruction_optimizer_fn=SGD(0.1), dataset_split_fn=None,
                     model_distributor=None, metrics_aggregation_process=None)
build_weighted_fed_avg_with_optimizer_schedule(model_fn, client_learning_rate_fn, ...)
build_weighted_mime_lite / build_unweighted_mime_lite / build_mime_lite_with_optimizer_schedule
build_fed_kmeans(num_clusters, data_shape, random_seed=None, distributor=None, sum_aggregator=None)
build_fed_multi_model_eval(model_fns, ...) / build_fed_multi_model_eval_from_processes(...)
build_personalization_eval_computation(model_fn, personalize_fn_dict, baseline_evaluate_fn, ...)
```
Every builder returns a `tff.learning.templates.LearningProcess`:
``state = process.initialize(); state, metrics = process.next(state, client_datasets)``.

The padded-array processes that were here (``build_algorithm``, ...) moved to
`simharness.learning.padded`. Names load on first use (PEP 562).
"""

from typing import Any

from simharness.lazy_names import LazyNames

_WHERE = {
    'build_unweighted_fed_avg': 'fed_avg',
    'build_weighted_fed_avg': 'fed_avg',
    'build_weighted_fed_avg_with_optimizer_schedule': 'fed_avg_with_optimizer_schedule',
    'build_fed_eval': 'fed_eval',
    'build_fed_recon': 'fed_recon',
    'build_fed_recon_eval': 'fed_recon_eval',
    'build_unweighted_fed_prox': 'fed_prox',
    'build_weighted_fed_prox': 'fed_prox',
    'build_fed_sgd': 'fed_sgd',
    'build_fed_kmeans': 'kmeans_clustering',
    'build_fed_multi_model_eval': 'fed_multi_model_eval',
    'build_fed_multi_model_eval_from_processes': 'fed_multi_model_eval',
    'build_personalization_eval_computation': 'personalization_eval',
    'build_mime_lite_with_optimizer_schedule': 'mime',
    'build_unweighted_mime_lite': 'mime',
    'build_weighted_mime_lite': 'mime',
}
_MODULES = (
    'fed_avg',
    'fed_avg_with_optimizer_schedule',
    'fed_eval',
    'fed_multi_model_eval',
    'fed_prox',
    'fed_recon',
    'fed_recon_eval',
    'fed_sgd',
    'kmeans_clustering',
    'mime',
    'personalization_eval',
)

__all__ = sorted(_WHERE)

_LAZY = LazyNames(__name__, _WHERE, _MODULES)


def __getattr__(name: str) -> Any:
    return _LAZY.attribute(name)


def __dir__() -> list:
    return _LAZY.listing()
