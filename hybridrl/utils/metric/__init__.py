"""Metric helpers shared by the driver and the workers (verl 0.5 path: ``verl.utils.metric``)."""

from hybridrl.utils.metric.utils import reduce_metrics

__all__ = ["reduce_metrics"]
