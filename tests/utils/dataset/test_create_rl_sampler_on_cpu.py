"""create_rl_sampler (verl 0.5: hybridrl.trainer.main_ppo.create_rl_sampler) and the data.sampler.* hook."""

from __future__ import annotations

import textwrap

import pytest
from omegaconf import OmegaConf
from torch.utils.data import RandomSampler, SequentialSampler

from hybridrl.experimental.dataset.sampler import AbstractCurriculumSampler
from hybridrl.trainer.main_ppo import create_rl_sampler
from hybridrl.utils.dataset.rl_dataset import create_rl_sampler as create_rl_sampler_in_dataset

DATASET = list(range(5))

SAMPLER_FILE = textwrap.dedent(
    """
    from hybridrl.experimental.dataset.sampler import AbstractCurriculumSampler

    class ReversedCurriculum(AbstractCurriculumSampler):
        def __init__(self, data_source, data_config):
            self.size = len(data_source)
            self.updates = []

        def __iter__(self):
            return iter(range(self.size - 1, -1, -1))

        def __len__(self):
            return self.size

        def update(self, batch):
            self.updates.append(batch)

    class NotASampler:
        def __init__(self, data_source, data_config):
            pass
    """
)


@pytest.fixture()
def sampler_file(tmp_path):
    path = tmp_path / "my_sampler.py"
    path.write_text(SAMPLER_FILE)
    return str(path)


def data_config(class_path, class_name, **extra):
    return OmegaConf.create({"sampler": {"class_path": class_path, "class_name": class_name}, **extra})


def test_main_ppo_exposes_the_dataset_module_function():
    assert create_rl_sampler is create_rl_sampler_in_dataset


def test_custom_curriculum_sampler_from_a_file(sampler_file):
    sampler = create_rl_sampler(data_config(sampler_file, "ReversedCurriculum", dataloader_num_workers=0), DATASET)
    assert isinstance(sampler, AbstractCurriculumSampler) and list(sampler) == [4, 3, 2, 1, 0]


class ForwardCurriculum(AbstractCurriculumSampler):
    """Importable as pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu (verl's own test uses this form)."""

    def __init__(self, data_source, data_config):
        self.size = len(data_source)

    def __iter__(self):
        return iter(range(self.size))

    def __len__(self):
        return self.size

    def update(self, batch):
        pass


def test_custom_sampler_from_a_pkg_module():
    cfg = data_config(
        "pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu", "ForwardCurriculum", dataloader_num_workers=0
    )
    assert list(create_rl_sampler(cfg, DATASET)) == [0, 1, 2, 3, 4]
    plain = data_config("pkg://torch/utils/data", "SequentialSampler", dataloader_num_workers=0)
    with pytest.raises(TypeError):  # a torch sampler does not take (data_source, data_config)
        create_rl_sampler(plain, DATASET)


def test_wrong_class_and_loader_workers_are_refused(sampler_file):
    with pytest.raises(AssertionError, match="NotASampler"):
        create_rl_sampler(data_config(sampler_file, "NotASampler", dataloader_num_workers=0), DATASET)
    with pytest.raises(AssertionError, match="dataloader_num_workers=0"):
        create_rl_sampler(data_config(sampler_file, "ReversedCurriculum", dataloader_num_workers=2), DATASET)
    with pytest.raises(AssertionError, match="dataloader_num_workers=0"):  # absent counts as verl's 8
        create_rl_sampler(data_config(sampler_file, "ReversedCurriculum"), DATASET)


def test_without_a_custom_class_shuffle_decides():
    no_class = {"sampler": {"class_path": None, "class_name": None}}
    assert isinstance(
        create_rl_sampler(OmegaConf.create({**no_class, "shuffle": True, "seed": 1}), DATASET), RandomSampler
    )
    assert isinstance(create_rl_sampler(OmegaConf.create({**no_class, "shuffle": False}), DATASET), SequentialSampler)
