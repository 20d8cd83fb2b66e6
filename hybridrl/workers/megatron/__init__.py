"""megatron-core training engine (``strategy=megatron``): model, weights, actor and workers."""
