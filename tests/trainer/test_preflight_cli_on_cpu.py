"""The command line stops on a preflight problem before Ray starts: exit 1, the message on stderr, no Ray banner."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.trainer.e2e import failure_report, grpo_args, run_main_ppo


def test_empty_train_file_exits_1_before_ray_naming_the_file(tiny_model_dir, tmp_path):
    rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": "What is 1 + 1?"}],
             "reward_model": {"style": "rule", "ground_truth": "2"}}]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, str(tmp_path / "test.parquet"))
    pq.write_table(table.slice(0, 0), str(tmp_path / "train.parquet"))  # schema kept, no rows
    args = grpo_args(tiny_model_dir, str(tmp_path), str(tmp_path / "ckpt"))
    proc = run_main_ppo(args, str(tmp_path / "metrics.jsonl"), timeout=120)
    assert proc.returncode == 1, failure_report(proc)
    assert f"data.train_files: {tmp_path / 'train.parquet'} has no rows" in proc.stderr, failure_report(proc)
    assert "Traceback" not in proc.stderr  # one ConfigError message, not a stack
    assert "Started a local Ray instance" not in proc.stdout + proc.stderr
