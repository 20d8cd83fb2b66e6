"""SFTDataset (prompt/response, nested keys, right padding, truncation, loss mask) and MultiTurnSFTDataset."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
from hybridrl.utils.dataset.sft_dataset import SFTDataset


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def test_sft_item_layout_and_loss_mask(tokenizer, tmp_path):
    path = write(tmp_path / "sft.parquet", [{"question": "What is 2 + 2?", "answer": "4"}])
    ds = SFTDataset(path, tokenizer, {"prompt_key": "question", "response_key": "answer", "max_length": 48})
    item = ds[0]
    prompt_ids = tokenizer.encode(
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    response_ids = tokenizer.encode("4<|im_end|>", add_special_tokens=False)
    p, r = len(prompt_ids), len(response_ids)
    assert item["input_ids"][: p + r].tolist() == prompt_ids + response_ids
    assert (item["input_ids"][p + r :] == tokenizer.pad_token_id).all()  # right padding
    assert item["attention_mask"].tolist() == [1] * (p + r) + [0] * (48 - p - r)
    # verl: mask positions [0, p-1) and p+r-1 → ones exactly at p-1 .. p+r-2 (they predict the response)
    assert item["loss_mask"].tolist() == [0] * (p - 1) + [1] * r + [0] * (48 - p - r + 1)
    assert item["position_ids"][: p + r].tolist() == list(range(p + r))


def test_sft_nested_keys_and_truncation(tokenizer, tmp_path):
    rows = [{"content": {"q": {"text": "hello there"}}, "reply": {"text": "general kenobi " * 10}}]
    path = write(tmp_path / "nested.parquet", rows)
    cfg = {
        "prompt_key": "content",
        "prompt_dict_keys": ["q", "text"],
        "response_key": "reply",
        "response_dict_keys": ["text"],
        "max_length": 12,
        "truncation": "right",
    }
    ds = SFTDataset(path, tokenizer, cfg)
    assert ds.prompts == ["hello there"]
    assert ds[0]["input_ids"].shape == (12,) and ds[0]["attention_mask"].sum() == 12
    with pytest.raises(ValueError, match="data.max_length=12"):
        SFTDataset(path, tokenizer, {**cfg, "truncation": "error"})[0]
    with pytest.raises(ValueError, match="nested key 'missing'"):
        SFTDataset(path, tokenizer, {**cfg, "prompt_dict_keys": ["missing"]})


def test_sft_missing_column_names_file(tokenizer, tmp_path):
    path = write(tmp_path / "cols.parquet", [{"question": "q"}])
    with pytest.raises(ValueError, match=r"cols.parquet.*'answer'"):
        SFTDataset(path, tokenizer, {"prompt_key": "question", "response_key": "answer"})


def test_multiturn_loss_only_on_assistant_turns(tokenizer, tmp_path):
    conversation = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "2+2"},
        {"role": "assistant", "content": "4"},
    ]
    path = write(tmp_path / "mt.parquet", [{"messages": conversation}])
    ds = MultiTurnSFTDataset(path, tokenizer, {"max_length": 64})
    ids, targets = ds.target_mask(ds.messages[0])
    assert tokenizer.decode([t for t, f in zip(ids, targets) if f]) == "hello<|im_end|>\n4<|im_end|>\n"
    item = ds[0]
    n = len(ids)
    assert item["input_ids"][:n].tolist() == ids and item["attention_mask"].sum() == n
    # shifted convention: loss_mask[t] == targets[t + 1]
    assert item["loss_mask"][: n - 1].tolist() == targets[1:]
    assert item["loss_mask"][n - 1 :].sum() == 0
