"""SFT data plumbing: validation shards see every sample once; multi-turn targets are assistant tokens only."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from config_testlib import compose_section

from hybridrl.trainer.sft.data import ValidationShard, build_dataset, dataset_class
from hybridrl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
from hybridrl.utils.dataset.sft_dataset import SFTDataset


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from hybridrl.utils.tokenizer import hf_tokenizer

    return hf_tokenizer(tiny_model_dir)


def test_validation_shards_cover_every_sample_once():
    items = [{"input_ids": torch.tensor([i]), "loss_mask": torch.tensor([1])} for i in range(5)]
    shards = [ValidationShard(items, rank, 2) for rank in range(2)]
    assert [len(s) for s in shards] == [3, 3]  # ceil(5 / 2)
    seen = [int(s[i]["input_ids"]) for s in shards for i in range(3) if int(s[i]["loss_mask"].sum())]
    assert sorted(seen) == [0, 1, 2, 3, 4]
    assert int(shards[1][2]["loss_mask"].sum()) == 0  # rank 1's third item is padding (index 5 does not exist)


def test_dataset_class_follows_multiturn_enable():
    assert dataset_class(compose_section("data", config_name="sft_trainer")) is SFTDataset
    assert dataset_class(compose_section("data", config_name="sft_trainer", multiturn__enable=True)) is MultiTurnSFTDataset


def test_multiturn_loss_targets_are_the_assistant_turns(tokenizer, tmp_path):
    conversation = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": "And 4 + 4?"},
        {"role": "assistant", "content": "8"},
    ]
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": conversation}]), path)
    config = compose_section("data", config_name="sft_trainer", max_length=64, multiturn__enable=True)
    item = build_dataset(str(path), tokenizer, config)[0]
    # the trainer's convention: position t counts when token t + 1 is a target (loss_mask[:, :-1] vs ids[:, 1:])
    targets = item["input_ids"][1:][item["loss_mask"][:-1].bool()]
    assert tokenizer.decode(targets) == "5<|im_end|>\n8<|im_end|>\n"
