"""TFF 0.88's public names of ``tff.aggregators`` and ``tff.templates`` exist here.

The lists are those of TFF's ``aggregators/__init__.py`` and
``core/templates/__init__.py``; a TFF program that uses them ports by renaming.
"""

import importlib

import pytest

import simharness as tff

TFF_AGGREGATORS = [
    'concat_factory',
    'DifferentiallyPrivateFactory',
    'AggregationFactory',
    'UnweightedAggregationFactory',
    'WeightedAggregationFactory',
    'as_weighted_aggregator',
    'MeanFactory',
    'UnweightedMeanFactory',
    'add_measurements',
    'federated_sample',
    'secure_quantized_sum',
    'PrivateQuantileEstimationProcess',
    'clipping_factory',
    'zeroing_factory',
    'DiscreteFourierTransformFactory',
    'HadamardTransformFactory',
    'UnweightedReservoirSamplingFactory',
    'SecureModularSumFactory',
    'SecureSumFactory',
    'SumFactory',
]
TFF_TEMPLATES = [
    'AggregationProcess',
    'EstimationProcess',
    'IterativeProcess',
    'chain_measured_processes',
    'concatenate_measured_processes',
    'MeasuredProcess',
    'MeasuredProcessOutput',
]


@pytest.mark.parametrize('name', TFF_AGGREGATORS)
def test_aggregators_name(name):
    assert hasattr(tff.aggregators, name) and name in tff.aggregators.__all__


@pytest.mark.parametrize('name', TFF_TEMPLATES)
def test_templates_name(name):
    assert hasattr(tff.templates, name) and name in tff.templates.__all__


@pytest.mark.parametrize(
    'module',
    [
        'concat',
        'deterministic_discretization',
        'differential_privacy',
        'factory',
        'factory_utils',
        'mean',
        'measurements',
        'modular_clipping',
        'primitives',
        'quantile_estimation',
        'robust',
        'rotation',
        'sampling',
        'secure',
        'stochastic_discretization',
        'sum_factory',
        'privacy.query',
        'privacy.quantile',
    ],
)
def test_tff_module_paths(module):
    assert importlib.import_module(f'simharness.aggregators.{module}')


@pytest.mark.parametrize(
    'module',
    [
        'aggregation_process',
        'errors',
        'estimation_process',
        'iterative_process',
        'measured_process',
    ],
)
def test_templates_module_paths(module):
    assert importlib.import_module(f'simharness.templates.{module}')
