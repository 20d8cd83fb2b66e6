"""The optimizer state of megatron-core's bf16 optimizers resumes exactly (the GPU path's classes, run on CPU).

bf16 parameters make megatron-core keep fp32 main copies: ``Float16OptimizerWithFloat16Params`` (whole copies) or
``DistributedOptimizer`` (this DP rank's shard). One rank, TP=1, the tiny Qwen2: step → save (model, optimizer,
extra) → step → weights W2; a second model + optimizer: load → step → weights must equal W2 bit for bit. Both
optimizers run one after the other in the same rank process (one start, one megatron-core grid: they differ only
in ``use_distributed_optimizer``).
"""

from __future__ import annotations

import pytest
import torch
from megatron_testlib import megatron_section, run_ranks


def _train_step(model, handle, seed: int) -> None:
    ids = torch.randint(5, 500, (2, 8), generator=torch.Generator().manual_seed(seed))
    handle.zero_grad()
    model.causal_lm(ids).logits.float().pow(2).mean().backward()
    handle.step()


def _bf16_resume(model_dir: str, ckpt: str, distributed: bool) -> dict:
    from config_testlib import compose_section
    from omegaconf import OmegaConf
    from transformers import AutoConfig

    from hybridrl.workers.megatron.actor import MegatronOptimizerHandle
    from hybridrl.workers.megatron.checkpoint import load_megatron_checkpoint, save_megatron_checkpoint
    from hybridrl.workers.megatron.engine import build_megatron_model, build_megatron_optimizer
    from hybridrl.workers.megatron.parallel import init_megatron_parallel

    section = OmegaConf.merge(megatron_section(1), {"use_distributed_optimizer": distributed})
    optim = compose_section("actor_rollout_ref.actor.optim", config_name="ppo_megatron_trainer", lr=1e-2)
    init_megatron_parallel(section, "cpu")
    hf_config = AutoConfig.from_pretrained(model_dir)
    runs = []
    for _ in range(2):
        model = build_megatron_model(model_dir, hf_config, section, torch.bfloat16, "cpu", trainable=True)
        optimizer = build_megatron_optimizer(model, optim, section)
        runs.append((model, optimizer, MegatronOptimizerHandle(optimizer, model)))
    (first, first_opt, first_handle), (second, second_opt, second_handle) = runs
    _train_step(first, first_handle, seed=1)
    save_megatron_checkpoint(ckpt, first, first_opt, save_contents=["model", "optimizer", "extra"])
    _train_step(first, first_handle, seed=2)
    load_megatron_checkpoint(ckpt, second, second_opt, load_contents=["model", "optimizer", "extra"])
    _train_step(second, second_handle, seed=2)
    resumed = _max_diff(first, second)
    # control: the same load, but the fp32 main copies rebuilt from the bf16 weights (what a model-only resume gets)
    load_megatron_checkpoint(ckpt, second, second_opt, load_contents=["model", "optimizer", "extra"])
    second_opt.reload_model_params()
    _train_step(second, second_handle, seed=2)
    return {"max_diff": resumed, "control": _max_diff(first, second),
            "optimizer": type(first_opt.chained_optimizers[0]).__name__,
            "dtype": str(next(first.gpt.parameters()).dtype)}


def _bf16_resumes(rank: int, model_dir: str, root: str) -> dict:
    """:func:`_bf16_resume` without, then with the distributed optimizer, each saving to its own folder."""
    return {f"{distributed}/{key}": value for distributed in (False, True)
            for key, value in _bf16_resume(model_dir, f"{root}/{distributed}/ckpt", distributed).items()}


def _max_diff(first, second) -> float:
    diffs = [(a.float() - b.float()).abs().max() for a, b in zip(first.gpt.parameters(), second.gpt.parameters())]
    return float(torch.stack(diffs).max())


@pytest.fixture(scope="module")
def bf16_resumes(tmp_path_factory, tiny_gqa_qwen2_dir) -> dict:
    """Both optimizers' resume results from one rank process (keys ``"<distributed>/<result>"``)."""
    root = tmp_path_factory.mktemp("bf16_resume")
    return run_ranks(_bf16_resumes, 1, root / "out", tiny_gqa_qwen2_dir, str(root))[0]


@pytest.mark.parametrize("distributed", [False, True], ids=["float16_optimizer", "distributed_optimizer"])
def test_bf16_optimizer_state_resumes_exactly(bf16_resumes, distributed):
    result = {key.split("/", 1)[1]: value for key, value in bf16_resumes.items()
              if key.startswith(f"{distributed}/")}
    print(f"{result['optimizer']} ({result['dtype']}): resumed vs uninterrupted weights max diff {result['max_diff']}"
          f" (control, main copies from the bf16 weights: {result['control']:.1e})")
    assert result["dtype"] == "torch.bfloat16"
    assert result["optimizer"] == ("DistributedOptimizer" if distributed else "Float16OptimizerWithFloat16Params")
    assert result["max_diff"] == 0.0
    assert result["control"] > 0.0  # the saved fp32 main copies are what makes it exact
