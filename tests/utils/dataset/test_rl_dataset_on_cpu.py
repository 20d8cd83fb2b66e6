"""RLHFDataset: chat template, left padding, truncation modes, overlong filtering, raw chat, custom class,
malformed parquet, and collate → DataProto."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from config_testlib import compose_section

from hybridrl.utils.dataset.rl_dataset import RLHFDataset, collate_fn, create_rl_dataset, get_dataset_class


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def make_rows(contents, data_source="arithmetic"):
    return [
        {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": c}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"split": "train", "index": 100 + i},
        }
        for i, c in enumerate(contents)
    ]


def write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


@pytest.fixture
def short_file(tmp_path):
    return write(tmp_path / "short.parquet", make_rows(["What is 1 + 2?", "What is 30 * 4?", "hello"]))


def test_chat_template_and_left_padding(tokenizer, short_file):
    ds = RLHFDataset(short_file, tokenizer, {"max_prompt_length": 40, "return_raw_chat": False})
    item = ds[0]
    expected_text = "<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n<|im_start|>assistant\n"
    expected_ids = tokenizer.encode(expected_text, add_special_tokens=False)
    n = len(expected_ids)
    assert item["input_ids"].shape == item["attention_mask"].shape == item["position_ids"].shape == (40,)
    # left padding: pads first, the prompt is right-aligned
    assert item["input_ids"][-n:].tolist() == expected_ids
    assert (item["input_ids"][: 40 - n] == tokenizer.pad_token_id).all()
    assert item["attention_mask"].tolist() == [0] * (40 - n) + [1] * n
    assert item["position_ids"].tolist() == [0] * (40 - n) + list(range(n))
    assert item["raw_prompt_ids"] == expected_ids
    assert item["index"] == 100 and item["tools_kwargs"] == {} and item["interaction_kwargs"] == {}
    assert item["reward_model"] == {"style": "rule", "ground_truth": "0"} and item["data_source"] == "arithmetic"
    assert "prompt" not in item and "raw_prompt" not in item and "full_prompts" not in item


def test_raw_chat_full_prompt_raw_input_ids(tokenizer, short_file):
    cfg = {"max_prompt_length": 40, "return_raw_chat": True, "return_full_prompt": True, "return_raw_input_ids": True}
    item = RLHFDataset(short_file, tokenizer, cfg)[1]
    assert item["raw_prompt"] == [{"role": "user", "content": "What is 30 * 4?"}]
    assert item["full_prompts"].endswith("<|im_start|>assistant\n")
    assert item["raw_input_ids"] == item["raw_prompt_ids"]


def test_custom_chat_template(tokenizer, short_file):
    template = "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:"
    item = RLHFDataset(short_file, tokenizer, {"max_prompt_length": 40, "custom_chat_template": template})[0]
    assert tokenizer.decode(item["raw_prompt_ids"]) == "Q: What is 1 + 2?\nA:"


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes(tokenizer, short_file, mode):
    full = RLHFDataset(short_file, tokenizer, {"max_prompt_length": 64})[0]["raw_prompt_ids"]
    k = 6
    assert len(full) > k
    item = RLHFDataset(short_file, tokenizer, {"max_prompt_length": k, "truncation": mode})[0]
    expected = {"left": full[-k:], "right": full[:k], "middle": full[: k // 2] + full[-(k - k // 2) :]}[mode]
    assert item["input_ids"].tolist() == expected
    assert item["raw_prompt_ids"] == expected
    assert item["attention_mask"].tolist() == [1] * k


def test_truncation_error_names_row_and_keys(tokenizer, short_file):
    ds = RLHFDataset(short_file, tokenizer, {"max_prompt_length": 6, "truncation": "error"})
    with pytest.raises(ValueError, match=r"row 1 .*data.max_prompt_length=6.*data.truncation=error"):
        ds[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_filter_overlong_prompts(tokenizer, tmp_path, workers):
    rows = make_rows(["hi", "What is " + " + ".join(str(i) for i in range(40)) + "?", "ok"])
    path = write(tmp_path / "mixed.parquet", rows)
    limit = 20
    lengths = [len(RLHFDataset(path, tokenizer, {"max_prompt_length": 512})[i]["raw_prompt_ids"]) for i in range(3)]
    assert lengths[0] <= limit < lengths[1] and lengths[2] <= limit
    cfg = {"max_prompt_length": limit, "filter_overlong_prompts": True, "filter_overlong_prompts_workers": workers}
    ds = RLHFDataset(path, tokenizer, cfg)
    assert len(ds) == 2
    assert [ds[i]["index"] for i in range(2)] == [100, 102]


def test_multiple_files_listconfig_and_home(tokenizer, tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    write(tmp_path / "a.parquet", make_rows(["a1", "a2"]))
    write(tmp_path / "b.parquet", make_rows(["b1"], data_source="openai/gsm8k"))
    monkeypatch.setenv("HOME", str(tmp_path))
    files = OmegaConf.create(["~/a.parquet", os.path.join(str(tmp_path), "b.parquet")])
    ds = RLHFDataset(files, tokenizer, compose_section("data", max_prompt_length=32))
    assert len(ds) == 3 and ds[2]["data_source"] == "openai/gsm8k"


def test_collate_to_dataproto(tokenizer, short_file):
    from hybridrl.protocol import DataProto

    ds = RLHFDataset(short_file, tokenizer, {"max_prompt_length": 40, "return_raw_chat": True})
    batch = collate_fn([ds[i] for i in range(3)])
    assert batch["input_ids"].shape == (3, 40) and batch["input_ids"].dtype == torch.long
    assert isinstance(batch["raw_prompt_ids"], np.ndarray) and batch["raw_prompt_ids"].dtype == object
    assert batch["raw_prompt_ids"].shape == (3,) and isinstance(batch["raw_prompt_ids"][0], list)
    proto = DataProto.from_single_dict(batch)
    assert len(proto) == 3
    assert proto.non_tensor_batch["reward_model"][2]["ground_truth"] == "2"
    assert proto.non_tensor_batch["raw_prompt"][0][0]["role"] == "user"


# ---------------------------------------------------------------------------- malformed input
def test_missing_file(tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        RLHFDataset(str(tmp_path / "nope.parquet"), tokenizer, {})


def test_unreadable_file(tokenizer, tmp_path):
    bad = tmp_path / "garbage.parquet"
    bad.write_text("this is not parquet")
    with pytest.raises(ValueError, match="garbage.parquet"):
        RLHFDataset(str(bad), tokenizer, {})


def test_missing_prompt_column(tokenizer, tmp_path):
    path = write(tmp_path / "noprompt.parquet", [{"question": "q", "data_source": "x"}])
    with pytest.raises(ValueError, match=r"noprompt.parquet.*'prompt'.*data.prompt_key"):
        RLHFDataset(path, tokenizer, {})


def test_prompt_column_wrong_type(tokenizer, tmp_path):
    path = write(tmp_path / "strprompt.parquet", [{"prompt": "just a string", "data_source": "x"}])
    with pytest.raises(ValueError, match=r"strprompt.parquet.*column 'prompt' has type string"):
        RLHFDataset(path, tokenizer, {})


def test_custom_prompt_key(tokenizer, tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}], "data_source": "x", "extra_info": {"index": 7}}]
    ds = RLHFDataset(
        write(tmp_path / "k.parquet", rows), tokenizer, {"prompt_key": "messages", "max_prompt_length": 16}
    )
    assert ds[0]["index"] == 7 and "messages" not in ds[0]


# ---------------------------------------------------------------------------- custom class
def test_custom_dataset_class(tokenizer, tmp_path, short_file):
    module = tmp_path / "my_dataset.py"
    module.write_text(
        "from hybridrl.utils.dataset.rl_dataset import RLHFDataset\n"
        "class Upper(RLHFDataset):\n"
        "    def __getitem__(self, i):\n"
        "        item = super().__getitem__(i)\n"
        "        item['tag'] = 'custom'\n"
        "        return item\n"
    )
    cfg = {"max_prompt_length": 40, "custom_cls": {"path": str(module), "name": "Upper"}}
    assert get_dataset_class(cfg).__name__ == "Upper"
    ds = create_rl_dataset(short_file, cfg, tokenizer)
    assert ds[0]["tag"] == "custom"
    with pytest.raises(AttributeError, match="Missing"):
        get_dataset_class({"custom_cls": {"path": str(module), "name": "Missing"}})
    with pytest.raises(FileNotFoundError, match="data.custom_cls.path"):
        get_dataset_class({"custom_cls": {"path": str(tmp_path / "none.py"), "name": "X"}})
