"""Cost of the MoE features on a small random Qwen3-MoE on CPU: the actor update with the router aux loss or R3
replay against the plain update, and the hf rollout with the routing record against the plain rollout.

Each configuration is timed ``--repeats`` times interleaved (A B C A B C ...) after a warm-up; the median wall time
is printed with its ratio to the plain run. Usage::

    python scripts/bench/bench_moe.py [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from omegaconf import open_dict

from hybridrl.models.transformers.moe_router import router_modules
from hybridrl.protocol import DataProto
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.torch_functional import compute_position_id_with_mask
from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.rollout.hf_rollout import HFRollout

BATCH, PROMPT, RESPONSE = 8, 32, 32


def build_model():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config).float()
    for router in router_modules(model):
        torch.nn.init.normal_(router.weight, std=1.0)
    return model.eval()


def rollout_engine(model, record: bool) -> HFRollout:
    config = section_with_defaults({}, "actor_rollout_ref.rollout")
    with open_dict(config):
        config.update(
            name="hf",
            response_length=RESPONSE,
            prompt_length=PROMPT,
            dtype="float32",
            calculate_log_probs=False,
            enable_rollout_routing_replay=record,
        )
        config.ignore_eos = True
    return HFRollout(model, config, eos_token_ids=[1], pad_token_id=0, seed=0)


def prompts() -> DataProto:
    input_ids = torch.randint(5, 500, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(input_ids)
    tensors = {"input_ids": input_ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    return DataProto.from_dict(tensors=tensors, meta_info={"eos_token_id": 1, "pad_token_id": 0})


def actor_config(aux_loss: bool, replay: bool):
    config = section_with_defaults({}, "actor_rollout_ref.actor")
    with open_dict(config):
        config.update(
            ppo_mini_batch_size=BATCH,
            ppo_micro_batch_size_per_gpu=BATCH,
            use_torch_compile=False,
            use_remove_padding=True,
            use_router_aux_loss=aux_loss,
            skip_zero_advantage_rows=False,
        )
        config.router_replay = {"mode": "R3" if replay else "disabled"}
    return config


def update_batch(rollout: DataProto) -> DataProto:
    batch = rollout.batch
    response_mask = batch["attention_mask"][:, -RESPONSE:]
    batch["response_mask"] = response_mask
    batch["advantages"] = torch.randn(BATCH, RESPONSE) * response_mask
    batch["old_log_probs"] = torch.zeros(BATCH, RESPONSE)
    rollout.meta_info["temperature"] = 1.0
    return rollout


def timed(fn, repeats: int, runs: dict[str, list[float]], name: str) -> None:
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.setdefault(name, []).append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = build_model()
    data = update_batch(rollout_engine(model, record=True).generate_sequences(prompts()))
    jobs = {
        "rollout": lambda: rollout_engine(model, False).generate_sequences(prompts()),
        "rollout+record": lambda: rollout_engine(model, True).generate_sequences(prompts()),
    }
    for name, aux, replay in (("update", False, False), ("update+aux_loss", True, False), ("update+R3", False, True)):
        actor_model = copy.deepcopy(model)
        actor = DataParallelPPOActor(
            actor_config(aux, replay), actor_model, torch.optim.SGD(actor_model.parameters(), lr=0.0)
        )
        jobs[name] = lambda actor=actor: actor.update_policy(data)
    runs: dict[str, list[float]] = {}
    for fn in jobs.values():  # warm-up
        fn()
    for _ in range(args.repeats):
        for name, fn in jobs.items():
            timed(fn, 1, runs, name)
    for name, times in runs.items():
        base = "rollout" if name.startswith("rollout") else "update"
        median = statistics.median(times)
        print(f"{name:18s} {median * 1000:8.1f} ms  x{median / statistics.median(runs[base]):.2f}")


if __name__ == "__main__":
    main()
