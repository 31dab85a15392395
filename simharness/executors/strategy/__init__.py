"""The federating strategy (`resolving_strategy.FederatedResolvingStrategy`): its client
groups and plans (`strategy_plans`) and its streamed client values and reductions
(`resolving_streams`)."""
