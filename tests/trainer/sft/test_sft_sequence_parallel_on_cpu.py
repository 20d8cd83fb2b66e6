"""Ulysses SP in the SFT trainer: one step on 2 gloo ranks with SP=2 (dp=1) ≡ one step on 1 rank without SP
(padded), and ≡ 1 rank with use_remove_padding=True.

Each run builds ``FSDPSFTTrainer`` in spawned processes (as tests/utils/test_ulysses_on_cpu.py does) on the
same data and global batch, and reports the step's loss and grad norm, the validation loss, the updated
parameters and the shapes the model's forward was called with.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.workers.engine.engine_testlib import run_ranks

pytestmark = pytest.mark.slow


def _write_pairs(out_dir: Path) -> Path:
    """question → answer rows of different lengths (so the packed rows and the SP padding vary)."""
    rows = [
        {"question": f"What is {a} plus {b}?" + " Think." * (a % 3), "answer": f"{a + b}" + " done" * (b % 4)}
        for a, b in [(1, 2), (3, 5), (7, 1), (4, 4), (9, 6), (2, 8), (5, 3), (6, 7), (8, 0), (0, 9)]
    ]
    pq.write_table(pa.Table.from_pylist(rows[:8]), out_dir / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[8:] + rows[:3]), out_dir / "val.parquet")  # 5 samples
    return out_dir


def _overrides(model_dir: str, data_dir: Path, ckpt_dir: Path, *extra: str) -> list[str]:
    return [
        f"data.train_files={data_dir / 'train.parquet'}",
        f"data.val_files={data_dir / 'val.parquet'}",
        "data.train_batch_size=4",
        "data.micro_batch_size_per_gpu=2",  # 2 micro batches: the token scaling spans grad accumulation
        "data.max_length=40",
        f"model.partial_pretrain={model_dir}",
        "optim.lr=1e-3",
        "optim.warmup_steps_ratio=0.0",
        "optim.lr_scheduler=constant",
        "optim.clip_grad=1e6",  # report the raw grad norm, update with the raw gradient
        "trainer.device=cpu",
        "trainer.total_training_steps=1",
        f"trainer.default_local_dir={ckpt_dir}",
        *extra,
    ]


def _full(param: torch.Tensor) -> torch.Tensor:
    return (param.full_tensor() if hasattr(param, "full_tensor") else param).detach().clone()


def _one_step(overrides: list[str]) -> dict:
    from hybridrl.config import compose_config
    from hybridrl.trainer.sft.config import validate_sft_config
    from hybridrl.trainer.sft.trainer import FSDPSFTTrainer

    config = compose_config("sft_trainer", overrides)
    validate_sft_config(config)
    trainer = FSDPSFTTrainer(config, "cpu")
    shapes: list[tuple[int, ...]] = []
    trainer.model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    before = {name: _full(p) for name, p in trainer.model.named_parameters()}
    grads: dict[str, torch.Tensor] = {}
    trainer.optimizer.register_step_pre_hook(
        lambda *_: grads.update({n: _full(p.grad) for n, p in trainer.model.named_parameters()})
    )
    batch = next(trainer._batches())
    metrics = trainer.training_step(batch)
    after = {name: _full(p) for name, p in trainer.model.named_parameters()}
    return {
        "metrics": metrics,
        "val_loss": trainer.validation_loss(),
        "before": before,
        "after": after,
        "grads": grads,
        "train_shapes": shapes[:2],
        "batch_ids": batch["input_ids"],
        "layout": (trainer.layout.dp_size, trainer.layout.dp_rank, trainer.layout.sp_size, trainer.layout.sp_rank),
    }


def _step_on_rank(rank: int, world: int, overrides: list[str]) -> dict:
    return _one_step(overrides)


def _run(world: int, overrides: list[str]) -> list[dict]:
    return run_ranks(_step_on_rank, world, overrides)


def test_sp2_step_equals_single_rank_step(tiny_model_dir, tmp_path):
    data_dir = _write_pairs(tmp_path)
    (single,) = _run(1, _overrides(tiny_model_dir, data_dir, tmp_path / "single"))
    (packed,) = _run(1, _overrides(tiny_model_dir, data_dir, tmp_path / "packed", "use_remove_padding=True"))
    sp = _run(
        2,
        _overrides(
            tiny_model_dir, data_dir, tmp_path / "sp", "use_remove_padding=True", "ulysses_sequence_parallel_size=2"
        ),
    )
    assert single["layout"] == (1, 0, 1, 0) and [r["layout"] for r in sp] == [(1, 0, 2, 0), (1, 0, 2, 1)]
    # the SP group loads the global batch on both ranks; single rank: padded [2, 40] micro batches
    for rank in sp:
        assert torch.equal(rank["batch_ids"], single["batch_ids"])
    assert single["train_shapes"] == [(2, 40), (2, 40)]
    nnz = [shape[1] for shape in packed["train_shapes"]]  # packed: one [1, nnz] row per micro batch
    assert [shape[0] for shape in packed["train_shapes"]] == [1, 1] and max(nnz) < 2 * 40
    for rank in sp:  # packed, then sliced: each rank runs [1, ceil(nnz / 2)] of a micro batch
        assert rank["train_shapes"] == [(1, (n + 1) // 2) for n in nnz]
    torch.testing.assert_close(
        torch.tensor([packed["metrics"]["train/loss"], packed["metrics"]["train/grad_norm"], packed["val_loss"]]),
        torch.tensor([single["metrics"]["train/loss"], single["metrics"]["train/grad_norm"], single["val_loss"]]),
        rtol=1e-5,
        atol=1e-6,
    )
    for rank in sp:  # measured: loss and val loss equal, grad norm 8e-7 relative, gradients 6e-8 absolute
        for key in ("train/loss", "train/grad_norm"):
            torch.testing.assert_close(
                torch.tensor(rank["metrics"][key]),
                torch.tensor(single["metrics"][key]),
                rtol=1e-5,
                atol=1e-6,
                msg=key,
            )
        torch.testing.assert_close(
            torch.tensor(rank["val_loss"]), torch.tensor(single["val_loss"]), rtol=1e-5, atol=1e-6
        )
        for name, grad in single["grads"].items():
            torch.testing.assert_close(rank["grads"][name], grad, rtol=1e-5, atol=1e-6, msg=name)
        # AdamW's first step moves a weight by ~lr·g/|g|, which turns rounding in tiny gradients into
        # up to 1.5e-6 here: compare the weights to 1% of one step (lr 1e-3)
        for name, param in single["after"].items():
            torch.testing.assert_close(rank["after"][name], param, rtol=0, atol=1e-5, msg=name)
    moved = max((single["after"][n] - single["before"][n]).abs().max() for n in single["after"])
    assert moved > 1e-4  # lr 1e-3: the step changed the weights
