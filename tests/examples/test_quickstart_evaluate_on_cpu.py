"""examples/quickstart/evaluate.py: the independent problem set (every 2-digit addition outside make_data.py's
splits), reading a user's verl-schema file, the carry split, and greedy scoring of a real (tiny) model whose
completions equal ``transformers.generate``'s and whose prompts are the trainer dataset's tokens."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from quickstart_testlib import load

evaluate = load("evaluate")


@pytest.fixture(scope="module")
def small_splits():
    return evaluate.quickstart_splits(train_size=100, test_size=10, seed=0)


def test_unseen_additions_are_every_problem_outside_the_splits(small_splits):
    unseen = evaluate.unseen_additions(small_splits)
    seen = {row["extra_info"]["expression"] for rows in small_splits.values() for row in rows}
    expressions = [row["extra_info"]["expression"] for row in unseen]
    assert len(expressions) == len(set(expressions)) == 90 * 90 - 110
    assert not seen & set(expressions)
    row = unseen[len(unseen) // 2]
    a, b = map(int, row["extra_info"]["expression"].split(" + "))
    assert row["reward_model"]["ground_truth"] == str(a + b)
    assert row["prompt"] == [{"role": "user", "content": f"What is {a} + {b}? Answer with just the number."}]
    assert row["data_source"] == "arithmetic" and row["extra_info"]["split"] == "independent"


def test_the_splits_are_the_files_make_data_writes(tmp_path):
    """The excluded problems are exactly the quickstart's training and validation files (same generator)."""
    folder = load("make_data").make_data(tmp_path, train_size=60, test_size=8, seed=0)
    splits = evaluate.quickstart_splits(train_size=60, test_size=8, seed=0)
    for split in ("train", "test"):
        written = pq.read_table(folder / f"{split}.parquet").to_pylist()
        assert [r["extra_info"]["expression"] for r in written] == [r["extra_info"]["expression"]
                                                                    for r in splits[split]]


def test_default_set_sizes():
    splits = evaluate.quickstart_splits()
    assert len(evaluate.unseen_additions(splits)) == 8100 - 4096 - 128 == 3876


def test_read_rows_parquet_and_jsonl(tmp_path, small_splits):
    rows = small_splits["test"]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("p.parquet", "p.jsonl"):
        got = evaluate.read_rows(tmp_path / name)
        assert [r["reward_model"]["ground_truth"] for r in got] == [r["reward_model"]["ground_truth"] for r in rows]


def test_read_rows_names_the_file_row_and_key(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "1+1?"}], "data_source": "arithmetic",
                               "reward_model": {"ground_truth": "2"}}) + "\n"
                   + json.dumps({"prompt": "1+2?", "data_source": "arithmetic"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl, row 1: 'prompt' is not a list"):
        evaluate.read_rows(bad)
    with pytest.raises(FileNotFoundError, match="no such file"):
        evaluate.read_rows(tmp_path / "missing.parquet")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="holds no rows"):
        evaluate.read_rows(tmp_path / "empty.jsonl")


def test_sample_rows_is_seeded_and_without_replacement():
    rows = [{"i": i} for i in range(50)]
    first, again = evaluate.sample_rows(rows, 20, seed=3), evaluate.sample_rows(rows, 20, seed=3)
    assert first == again and len({r["i"] for r in first}) == 20
    assert evaluate.sample_rows(rows, 20, seed=4) != first
    assert evaluate.sample_rows(rows, None, seed=3) == rows == evaluate.sample_rows(rows, 80, seed=3)
    with pytest.raises(ValueError, match="--num must be positive"):
        evaluate.sample_rows(rows, 0, seed=3)


def _row(expression: str, truth: int) -> dict:
    return {"data_source": "arithmetic", "reward_model": {"ground_truth": str(truth)},
            "extra_info": {"expression": expression}, "prompt": [{"role": "user", "content": expression}]}


def test_carry_and_tally_by_hand():
    assert evaluate.has_carry(_row("15 + 27", 42)) is True  # 5 + 7 = 12
    assert evaluate.has_carry(_row("12 + 34", 46)) is False
    assert evaluate.has_carry(_row("12 * 34", 408)) is None
    tally = evaluate.Tally()
    cases = [("15 + 27", 42, "42"), ("15 + 28", 43, "15 + 28 = 33"), ("12 + 34", 46, "It is 46."),
             ("12 * 34", 408, "408")]
    for expression, truth, completion in cases:
        row = _row(expression, truth)
        tally.add(row, completion, evaluate.score(row, completion))
    wilson = load("summarize").wilson_interval
    summary = tally.summary(wilson)
    assert (summary["correct"], summary["total"], summary["accuracy"]) == (3, 4, 0.75)
    assert summary["carry"] == {"correct": 1, "total": 2, "accuracy": 0.5}
    assert summary["no carry"] == {"correct": 1, "total": 1, "accuracy": 1.0}
    assert (summary["ci95_low"], summary["ci95_high"]) == pytest.approx(wilson(3, 4))
    assert tally.mistakes == [{"expression": "15 + 28", "ground_truth": "43", "completion": "15 + 28 = 33"}]


def test_prompts_are_the_trainer_datasets_tokens(tiny_model_dir, tmp_path, small_splits):
    from transformers import AutoTokenizer

    from hybridrl.utils.dataset.rl_dataset import RLHFDataset

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = small_splits["test"][:5]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    dataset = RLHFDataset(str(tmp_path / "rows.parquet"), tokenizer, {"max_prompt_length": 64})
    input_ids, attention_mask = evaluate.encode_prompts(tokenizer, rows, max_prompt_length=64)
    for i in range(len(rows)):
        item = dataset[i]
        ours = input_ids[i][attention_mask[i].bool()].tolist()
        assert ours == item["input_ids"][item["attention_mask"].bool()].tolist()
    with pytest.raises(ValueError, match="--max_prompt_length=3"):
        evaluate.encode_prompts(tokenizer, rows, max_prompt_length=3)


def test_greedy_completions_equal_generate(tiny_model_dir, small_splits):
    model, tokenizer, dtype = evaluate.load_model(tiny_model_dir, "float32")
    rows = small_splits["test"][:4]
    ours = evaluate.greedy_completions(model, tokenizer, rows, max_new_tokens=8, max_prompt_length=64)
    eos = model.generation_config.eos_token_id
    for row, completion in zip(rows, ours):
        ids, _ = evaluate.encode_prompts(tokenizer, [row], max_prompt_length=64)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=8,
                                 eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
        assert completion == tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_main_end_to_end_writes_json(tiny_model_dir, tmp_path, small_splits):
    pq.write_table(pa.Table.from_pylist(small_splits["train"][:7]), tmp_path / "mine.parquet")
    out = tmp_path / "eval.json"
    figures = evaluate.main(["--model", tiny_model_dir, "--file", str(tmp_path / "mine.parquet"), "--num", "5",
                             "--batch_size", "2", "--max_new_tokens", "4", "--dtype", "float32", "--threads", "1",
                             "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["sets"] == figures and figures["file"]["total"] == 5
    fig = figures["file"]
    assert fig["ci95_low"] <= fig["accuracy"] <= fig["ci95_high"]
    assert fig["carry"]["total"] + fig["no carry"]["total"] == 5
    assert len(report["mistakes"]["file"]) == 5 - fig["correct"]
    with pytest.raises(FileNotFoundError, match="not a Hugging Face model folder"):
        evaluate.main(["--model", str(tmp_path), "--file", str(tmp_path / "mine.parquet")])
