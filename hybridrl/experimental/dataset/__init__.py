"""Experimental data interfaces (verl 0.5 path: ``verl.experimental.dataset``)."""

from hybridrl.experimental.dataset.sampler import AbstractCurriculumSampler, AbstractSampler

__all__ = ["AbstractCurriculumSampler", "AbstractSampler"]
