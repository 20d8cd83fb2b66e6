"""Megatron checkpoints: exact resume at TP=2, merge to HF (TP=1 and TP=2), refusal of incomplete or poisoned folders.

One TP=2 run (2 gloo ranks, the tied tiny Qwen2) makes the checkpoint all tests share: PPO update 1 → save
(model, optimizer, extra, hf_model) → update 2 → log-probs L2 of a probe batch. Adam, lr warmup from 1e-4 over 4
steps (the LR scheduler's position matters), clip 1.0.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from megatron_testlib import off_policy_update, policy_batch, policy_config, run_ranks

# fp32 on CPU, same kernels in the same order: resume is bit-exact (measured max diff 0.0)
RESUME_TOLERANCE = 0.0
# merged HF folder (eager attention) vs megatron-core's logits (measured 2.4e-7 at TP=2, 1.5e-7 at TP=1)
MERGED_LOGITS_TOLERANCE = 1e-5
_CONTENTS = "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
_SCHEDULE = ("actor_rollout_ref.actor.optim.lr_warmup_steps=4", "actor_rollout_ref.actor.optim.lr_warmup_init=1e-4")


def _worker(model_dir: str, tp_size: int, *overrides: str):
    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    config = policy_config(model_dir, tp_size, _CONTENTS, *_SCHEDULE, *overrides)
    worker = MegatronActorRolloutRefWorker(config, role="actor")
    worker.init_model()
    return worker


@torch.no_grad()
def _probe_logits(worker) -> torch.Tensor:
    """Megatron logits ``[2, 9, V]`` of a fixed unpadded batch."""
    input_ids = torch.randint(5, 500, (2, 9), generator=torch.Generator().manual_seed(7))
    positions = torch.arange(9).expand(2, 9)
    return worker.actor_model.causal_lm(input_ids, torch.ones_like(input_ids), positions).logits


def _train_save_train(rank: int, model_dir: str, ckpt: str, tp_size: int) -> dict:
    worker = _worker(model_dir, tp_size)
    off_policy_update(worker, seed=1)
    worker.save_checkpoint(ckpt, global_step=1)
    logits = _probe_logits(worker)
    off_policy_update(worker, seed=3)
    return {"logits": logits, "l2": worker.compute_log_prob(policy_batch(seed=2)).batch["old_log_probs"]}


def _refusal_message(worker, path: str) -> str:
    try:
        worker.load_checkpoint(path)
    except Exception as error:  # noqa: BLE001  (the test asserts on type and message)
        return f"{type(error).__name__}: {error}"
    return "loaded"


def _refuse_then_resume(rank: int, model_dir: str, ckpt: str, tp_size: int, bad: dict[str, str]) -> dict:
    """Refusals (no state change), then a model-only load + update (the control), then the full resume + update."""
    from hybridrl.workers.megatron.checkpoint import load_megatron_checkpoint

    worker = _worker(model_dir, tp_size)
    refusals = {kind: _refusal_message(worker, path) for kind, path in bad.items()}
    probe = policy_batch(seed=2)
    load_megatron_checkpoint(ckpt, worker.actor_model, worker.actor_optimizer.optimizer, worker.actor_lr_scheduler,
                             load_contents=["model"])  # fresh Adam moments, LR schedule at step 0
    off_policy_update(worker, seed=3)
    model_only = worker.compute_log_prob(probe).batch["old_log_probs"]
    worker.load_checkpoint(ckpt)
    off_policy_update(worker, seed=3)
    return {"l2": worker.compute_log_prob(probe).batch["old_log_probs"], "model_only": model_only, **refusals}


def _assert_exact_resume(saved: list[dict], resumed: list[dict]) -> None:
    mask = policy_batch(seed=2).batch["response_mask"].bool()
    for rank, (before, after) in enumerate(zip(saved, resumed)):
        diff = (after["l2"] - before["l2"])[mask].abs().max().item()
        control = (after["model_only"] - before["l2"])[mask].abs().max().item()
        print(f"rank {rank}: log-probs after update 2, resumed vs uninterrupted: max diff {diff:.1e} "
              f"(model-only load: {control:.1e})")
        assert diff <= RESUME_TOLERANCE
        assert control > 1e-4  # the optimizer and LR-schedule state matter: without them update 2 differs


class _Payload:
    """Unpickling it creates ``path``: proof that a file was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def _bad_copies(ckpt: Path, root: Path) -> dict[str, str]:
    """Copies of the checkpoint: a missing rank file, a pickle in place of a shard (+ one beside it), no marker."""
    copies = {}
    for kind in ("missing", "pickle", "unmarked"):
        copies[kind] = str(shutil.copytree(ckpt, root / kind / "global_step_1" / "actor"))
    os.remove(Path(copies["missing"]) / "optim" / "distrib_optim_pp0_tp1_cp0_dp0.safetensors")
    os.remove(Path(copies["missing"]) / "model" / "mp_rank_01" / "model.safetensors")
    for name in ("model/mp_rank_01/model.safetensors", "model/mp_rank_01/model.pt"):
        with open(Path(copies["pickle"]) / name, "wb") as f:
            pickle.dump(_Payload(str(root / "UNPICKLED")), f)
    os.remove(Path(copies["unmarked"]) / "checkpoint_complete.json")
    return copies


@pytest.fixture(scope="module")
def tp2_run(tmp_path_factory, tiny_gqa_qwen2_dir):
    root = tmp_path_factory.mktemp("megatron_ckpt")
    ckpt = root / "ckpt" / "global_step_1" / "actor"
    results = run_ranks(_train_save_train, 2, root / "save", tiny_gqa_qwen2_dir, str(ckpt), 2)
    return root, ckpt, results


def test_tp2_resume_is_exact_and_bad_folders_are_refused(tp2_run, tiny_gqa_qwen2_dir):
    root, ckpt, saved = tp2_run
    assert sorted(os.listdir(ckpt)) == ["checkpoint_complete.json", "extra_state.json", "huggingface",
                                        "megatron_checkpoint.json", "model", "optim", "rng_states",
                                        "transformer_config.json"]
    assert sorted(os.listdir(ckpt / "model")) == ["mp_rank_00", "mp_rank_01"]
    bad = _bad_copies(ckpt, root / "bad")
    resumed = run_ranks(_refuse_then_resume, 2, root / "load", tiny_gqa_qwen2_dir, str(ckpt), 2, bad)
    _assert_exact_resume(saved, resumed)
    for rank in (0, 1):
        assert resumed[rank]["missing"].startswith("FileNotFoundError")
        assert "model/mp_rank_01/model.safetensors is missing" in resumed[rank]["missing"]
        assert resumed[rank]["pickle"].startswith("CheckpointShardError")  # rank 0 reports rank 1's error
        assert "model/mp_rank_01/model.safetensors" in resumed[rank]["pickle"]
        assert "no checkpoint_complete.json" in resumed[rank]["unmarked"]
    assert not (root / "bad" / "UNPICKLED").exists()


def test_dp2_distributed_optimizer_resume_is_exact(tmp_path, tiny_gqa_qwen2_dir):
    """TP=1 on 2 ranks: DP=2, each rank's distributed-optimizer shard in its own file."""
    ckpt = tmp_path / "ckpt" / "global_step_1" / "actor"
    saved = run_ranks(_train_save_train, 2, tmp_path / "save", tiny_gqa_qwen2_dir, str(ckpt), 1)
    assert sorted(os.listdir(ckpt / "optim")) == [f"distrib_optim_pp0_tp0_cp0_dp{d}.safetensors" for d in (0, 1)]
    assert os.listdir(ckpt / "model") == ["mp_rank_00"]
    _assert_exact_resume(saved, run_ranks(_refuse_then_resume, 2, tmp_path / "load", tiny_gqa_qwen2_dir, str(ckpt), 1, {}))


def _hf_logits(hf_dir: str) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    input_ids = torch.randint(5, 500, (2, 9), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        return model(input_ids=input_ids).logits


def _merge_and_compare(ckpt: Path, target: Path, megatron_logits: torch.Tensor) -> float:
    from hybridrl import model_merger

    model_merger.main(["merge", "--backend", "megatron", "--local_dir", str(ckpt), "--target_dir", str(target)])
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= set(os.listdir(target))
    model_merger.main(["test", "--backend", "megatron", "--local_dir", str(ckpt),
                       "--test_hf_dir", str(ckpt / "huggingface")])  # merged == the hf_model copy, tensor by tensor
    return (_hf_logits(str(target)) - megatron_logits).abs().max().item()


def test_tp2_merged_folder_reproduces_megatron_logits(tp2_run, tmp_path):
    _root, ckpt, saved = tp2_run
    diff = _merge_and_compare(ckpt, tmp_path / "hf", saved[0]["logits"])
    print(f"merged HF vs Megatron TP=2 logits: max diff {diff:.1e}")
    assert diff < MERGED_LOGITS_TOLERANCE


def _train_save(rank: int, model_dir: str, root: str) -> dict:
    """Update, save step 1, save step 2 with ``max_ckpt_to_keep=1`` (step 1 is rotated away)."""
    worker = _worker(model_dir, 1, "actor_rollout_ref.actor.megatron.use_mbridge=True")
    off_policy_update(worker, seed=1)
    for step in (1, 2):
        worker.save_checkpoint(f"{root}/global_step_{step}/actor", global_step=step, max_ckpt_to_keep=1)
    return {"logits": _probe_logits(worker)}


def test_tp1_untied_llama_mbridge_merged_folder_reproduces_megatron_logits(tmp_path, tiny_gqa_llama_dir):
    """TP=1, weights in and out through mbridge (hf_model), merged with the built-in converter: both agree."""
    saved = run_ranks(_train_save, 1, tmp_path / "save", tiny_gqa_llama_dir, str(tmp_path / "ckpt"))[0]
    assert os.listdir(tmp_path / "ckpt") == ["global_step_2"]
    ckpt = tmp_path / "ckpt" / "global_step_2" / "actor"
    diff = _merge_and_compare(ckpt, tmp_path / "hf", saved["logits"])
    print(f"merged HF vs Megatron TP=1 logits (untied Llama, mbridge): max diff {diff:.1e}")
    assert diff < MERGED_LOGITS_TOLERANCE


def _merge_error(*args: str) -> str:
    from hybridrl import model_merger

    try:
        model_merger.main(["merge", *args])
    except (Exception, SystemExit) as error:  # noqa: BLE001  (the test asserts on type and message)
        return f"{type(error).__name__}: {error}"
    return "merged"


def test_merger_errors_name_the_problem(tp2_run, tmp_path, capsys):
    from hybridrl.utils.checkpoint import is_checkpoint_complete

    _root, ckpt, _saved = tp2_run
    bad = _bad_copies(ckpt, tmp_path / "bad")
    out = str(tmp_path / "out")
    megatron = ("--backend", "megatron", "--target_dir", out)
    assert "is not a folder" in _merge_error(*megatron, "--local_dir", str(tmp_path / "nope"))
    step_dir = _merge_error(*megatron, "--local_dir", str(ckpt.parent))
    assert "megatron_checkpoint.json not found" in step_dir and "global_step_N/<actor|critic>" in step_dir
    assert "use --backend megatron" in _merge_error("--backend", "fsdp", "--target_dir", out, "--local_dir", str(ckpt))
    missing = _merge_error(*megatron, "--local_dir", bad["missing"])
    assert missing.startswith("FileNotFoundError") and "model/mp_rank_01/model.safetensors is missing" in missing
    poisoned = _merge_error(*megatron, "--local_dir", bad["pickle"])
    assert poisoned.startswith("CheckpointShardError") and "model/mp_rank_01/model.safetensors" in poisoned
    assert not (tmp_path / "bad" / "UNPICKLED").exists()
    assert "no checkpoint_complete.json" in _merge_error(*megatron, "--local_dir", bad["unmarked"])
    # the trainer's resume skips a step folder whose Megatron actor is unmarked, even beside a complete critic
    step_dir = Path(bad["unmarked"]).parent
    shutil.copytree(ckpt, step_dir / "critic")
    assert is_checkpoint_complete(str(step_dir / "critic")) and not is_checkpoint_complete(str(step_dir))
    assert _merge_error("--backend", "megatron", "--local_dir", str(ckpt)).startswith("SystemExit")
    assert "merge needs --target_dir" in capsys.readouterr().err
    assert not os.path.exists(out)
