"""examples/data_preprocess: the scripts write parquet that RLHFDataset reads and the scorers accept."""

import importlib.util
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.utils.dataset.rl_dataset import RLHFDataset
from hybridrl.utils.reward_score import default_compute_score

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data_preprocess")


def load_script(name):
    spec = importlib.util.spec_from_file_location(f"preprocess_{name}", os.path.join(ROOT, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


GSM8K_FIXTURE = {
    "train": [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"question": "A car costs $1,200 and a bike $300. Total?", "answer": "1200+300=1500\n#### 1,500"},
    ],
    "test": [{"question": "It is 5 degrees, it drops 8. Now?", "answer": "5-8=-3\n#### -3"}],
}


@pytest.mark.parametrize("layout", ["jsonl", "hf_parquet"])
def test_gsm8k_conversion(tmp_path, tokenizer, layout):
    src = tmp_path / "gsm8k_raw"
    if layout == "jsonl":
        src.mkdir()
        for split, rows in GSM8K_FIXTURE.items():
            (src / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    else:  # the openai/gsm8k repo layout: main/{split}-00000-of-00001.parquet
        (src / "main").mkdir(parents=True)
        for split, rows in GSM8K_FIXTURE.items():
            pq.write_table(pa.Table.from_pylist(rows), str(src / "main" / f"{split}-00000-of-00001.parquet"))
    out = tmp_path / "out"
    load_script("gsm8k").main(["--local_dataset_path", str(src), "--local_dir", str(out)])
    train = pq.read_table(str(out / "train.parquet")).to_pylist()
    assert train[1]["reward_model"] == {"style": "rule", "ground_truth": "1500"}  # commas removed
    assert train[0]["prompt"][0]["content"].endswith('output the final answer after "####".')
    assert train[0]["extra_info"] == {
        "split": "train",
        "index": 0,
        "answer": GSM8K_FIXTURE["train"][0]["answer"],
        "question": GSM8K_FIXTURE["train"][0]["question"],
    }
    ds = RLHFDataset(str(out / "test.parquet"), tokenizer, {"max_prompt_length": 128, "truncation": "left"})
    item = ds[0]
    assert item["data_source"] == "openai/gsm8k" and item["reward_model"]["ground_truth"] == "-3"
    assert default_compute_score(item["data_source"], "so #### -3", item["reward_model"]["ground_truth"]) == 1.0


def test_gsm8k_missing_split_is_clear(tmp_path):
    (tmp_path / "raw").mkdir()
    with pytest.raises(FileNotFoundError, match="no train split"):
        load_script("gsm8k").main(["--local_dataset_path", str(tmp_path / "raw"), "--local_dir", str(tmp_path / "o")])


def test_arithmetic_generator(tmp_path, tokenizer):
    mod = load_script("arithmetic")
    args = ["--train_size", "50", "--test_size", "10", "--digits", "2", "--operators", "+-", "--seed", "3"]
    mod.main([*args, "--local_dir", str(tmp_path / "a")])
    mod.main([*args, "--local_dir", str(tmp_path / "b")])
    a = pq.read_table(str(tmp_path / "a" / "train.parquet")).to_pylist()
    assert a == pq.read_table(str(tmp_path / "b" / "train.parquet")).to_pylist()  # fixed seed → same data
    test = pq.read_table(str(tmp_path / "a" / "test.parquet")).to_pylist()
    assert len(a) == 50 and len(test) == 10
    assert not {r["extra_info"]["expression"] for r in a} & {r["extra_info"]["expression"] for r in test}
    for row in a:
        x, op, y = row["extra_info"]["expression"].split()
        assert op in "+-" and 10 <= int(x) <= 99
        assert int(row["reward_model"]["ground_truth"]) == (int(x) + int(y) if op == "+" else int(x) - int(y))
    ds = RLHFDataset(str(tmp_path / "a" / "train.parquet"), tokenizer, {"max_prompt_length": 48})
    item = ds[0]
    assert item["data_source"] == "arithmetic" and item["attention_mask"].sum() > 0
    assert (
        default_compute_score(
            "arithmetic", f"= {item['reward_model']['ground_truth']}", item["reward_model"]["ground_truth"]
        )
        == 1.0
    )


def test_countdown_generator_targets_are_reachable(tmp_path, tokenizer):
    import itertools

    load_script("countdown").main(
        ["--train_size", "20", "--test_size", "5", "--seed", "1", "--local_dir", str(tmp_path)]
    )
    rows = pq.read_table(str(tmp_path / "train.parquet")).to_pylist()
    assert len(rows) == 20
    again = tmp_path / "again"  # fixed seed → identical files; another seed → other puzzles
    load_script("countdown").main(["--train_size", "20", "--test_size", "5", "--seed", "1", "--local_dir", str(again)])
    assert pq.read_table(str(again / "train.parquet")).to_pylist() == rows
    other = tmp_path / "other"
    load_script("countdown").main(["--train_size", "20", "--test_size", "5", "--seed", "2", "--local_dir", str(other)])
    assert pq.read_table(str(other / "train.parquet")).to_pylist() != rows
    for row in rows[:5]:  # brute force: some left-fold of the numbers reaches the target
        gt = row["reward_model"]["ground_truth"]
        found = False
        for perm in itertools.permutations(gt["numbers"]):
            for ops in itertools.product("+-*/", repeat=len(perm) - 1):
                expr = str(perm[0])
                for op, n in zip(ops, perm[1:]):
                    expr = f"({expr} {op} {n})"
                answer = f"<answer>{expr}</answer>"
                if default_compute_score("countdown", answer, gt) == 1.0:
                    found = True
                    break
            if found:
                break
        assert found, gt
    ds = RLHFDataset(str(tmp_path / "test.parquet"), tokenizer, {"max_prompt_length": 256, "truncation": "left"})
    assert ds[0]["data_source"] == "countdown" and set(ds[0]["reward_model"]["ground_truth"]) == {"target", "numbers"}


def test_shapes_generator_draws_the_answer(tmp_path):
    mod = load_script("shapes")
    mod.main(["--local_dir", str(tmp_path), "--train_size", "12", "--test_size", "4", "--seed", "3"])
    train = pq.read_table(str(tmp_path / "train.parquet")).to_pylist()
    assert len(train) == 12 and len(pq.read_table(str(tmp_path / "test.parquet"))) == 4
    assert train == mod.generate(12, 4, seed=3)["train"]  # deterministic for a seed
    for row in train:
        from PIL import Image

        image = Image.open(io.BytesIO(row["images"][0]["bytes"]))
        left, top, right, bottom = row["extra_info"]["box"]
        centre = ((left + right) // 2, top + (bottom - top) * 2 // 3)  # inside a circle, a square and a triangle
        assert image.size == (56, 56)
        assert image.convert("RGB").getpixel(centre) == mod.COLOURS[row["reward_model"]["ground_truth"]]
        assert row["prompt"][0]["content"].count("<image>") == len(row["images"]) == 1
    assert len({row["reward_model"]["ground_truth"] for row in train}) > 1
    blank = mod.generate(2, 0, seed=3, blank=True)["train"]
    pixels = Image.open(io.BytesIO(blank[0]["images"][0]["bytes"])).convert("RGB").getcolors()
    assert pixels == [(56 * 56, mod.BACKGROUND)]  # the control's images carry no answer
    assert [r["reward_model"] for r in blank] == [r["reward_model"] for r in train[:2]]
