"""verl's path for the custom-sampler base classes; the code lives in :mod:`hybridrl.utils.dataset.sampler`."""

from hybridrl.utils.dataset.sampler import AbstractCurriculumSampler, AbstractSampler

__all__ = ["AbstractCurriculumSampler", "AbstractSampler"]
