"""create_rl_sampler + StatefulDataLoader: seeded order, exact mid-epoch resume, epoch-boundary resume."""

import pytest
import torch
from torch.utils.data import RandomSampler, SequentialSampler

from hybridrl.utils.dataset.dataloader import create_train_dataloader, load_dataloader_state
from hybridrl.utils.dataset.rl_dataset import create_rl_sampler

DATA = list(range(10))
CFG = {"shuffle": True, "seed": 7, "train_batch_size": 3, "dataloader_num_workers": 0}


def plain_collate(items):
    return torch.tensor(items)


def loader():
    return create_train_dataloader(CFG, DATA, collate_fn=plain_collate)


def epochs(dl, n):
    return [[b.tolist() for b in dl] for _ in range(n)]


def test_sampler_kinds_and_seed():
    assert isinstance(create_rl_sampler({"shuffle": False}, DATA), SequentialSampler)
    a, b = create_rl_sampler(CFG, DATA), create_rl_sampler(CFG, DATA)
    assert isinstance(a, RandomSampler) and list(a) == list(b)  # same seed → same order
    assert list(a) != list(create_rl_sampler({**CFG, "seed": 8}, DATA))
    assert sorted(list(create_rl_sampler(CFG, DATA))) == DATA
    assert list(create_rl_sampler({"shuffle": True}, DATA)) == list(
        create_rl_sampler({"shuffle": True, "seed": 1}, DATA)
    )


def test_drop_last_batches():
    dl = loader()
    assert len(dl) == 3  # 10 // 3, the last partial batch dropped
    assert all(len(b) == 3 for b in epochs(dl, 1)[0])


@pytest.mark.parametrize("consumed", [1, 2])
def test_resume_mid_epoch_is_exact(consumed):
    reference = epochs(loader(), 3)
    dl = loader()
    it = iter(dl)
    seen = [next(it).tolist() for _ in range(consumed)]
    state = dl.state_dict()
    assert seen == reference[0][:consumed]
    resumed = loader()
    assert load_dataloader_state(resumed, state) is False
    assert [b.tolist() for b in resumed] == reference[0][consumed:]  # the rest of epoch 0
    assert epochs(resumed, 2) == reference[1:]  # later epochs identical too


def test_resume_at_epoch_boundary_starts_next_epoch():
    reference = epochs(loader(), 3)
    dl = loader()
    it = iter(dl)
    for _ in range(len(dl)):  # the trainer checkpoints right after the epoch's last step
        next(it)
    state = dl.state_dict()
    resumed = loader()
    assert load_dataloader_state(resumed, state) is True
    first = [b.tolist() for b in resumed]
    assert first == reference[1]  # not an empty epoch: the next epoch, in the uninterrupted order
    assert epochs(resumed, 1) == [reference[2]]
