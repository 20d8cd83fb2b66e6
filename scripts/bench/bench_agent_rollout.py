"""Agent rollouts vs single-turn generation: useful (model-generated) tokens per second.

Agent side: N concurrent conversations through the hf async server, each ``--turns`` model turns of
``--tokens-per-turn`` tokens with a tool message between turns (its tokens appended with ``ChatTokens.turn_ids``,
as ``tool_agent`` does), i.e. ``tool_agent``'s serving pattern without a model that happens to call tools.
Peer, same run: one single-turn ``HFRollout.generate_sequences`` call on the same N prompts generating the same
total length (``turns × tokens_per_turn``) per row. Both ``ignore_eos`` (exact lengths), temperature 1,
log-probs on. Target of issue 17: ratio >= 0.7. Median of ``--repeats`` runs (the two sides alternate) after a warm-up; JSON to stdout.

    python scripts/bench/bench_agent_rollout.py --model small --conversations 16 --turns 3 --tokens-per-turn 32
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_continuous_batching import (  # noqa: E402
    MODELS,
    build_model_dir,
    one_batch_call,
    prompt_lists,
    rollout_section,
    timed_pair,
)
from figures import emit_json, log  # noqa: E402

TOOL_TEXT = "result: 1234"
TARGET_RATIO = 0.7


async def _conversation(server, chat, index: int, prompt: list[int], turns: int, tokens: int) -> int:
    context, generated = list(prompt), 0
    for turn in range(turns):
        out = await server.generate(f"c{index}", context, {"max_tokens": tokens, "ignore_eos": True,
                                                           "seed": index * 1000 + turn})
        context += out.token_ids
        generated += len(out.token_ids)
        if turn < turns - 1:
            context += chat.turn_ids([{"role": "tool", "content": TOOL_TEXT}], out.token_ids[-1])
    return generated


def agent_call(server, chat, prompts: list[list[int]], turns: int, tokens: int) -> int:
    async def play() -> int:
        counts = await asyncio.gather(*(_conversation(server, chat, i, p, turns, tokens) for i, p in enumerate(prompts)))
        return sum(counts)

    return asyncio.run(play())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", choices=sorted(MODELS))
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens-per-turn", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hybridrl.generation.chat_tokens import ChatTokens
    from hybridrl.workers.rollout.async_server import build_async_server
    from hybridrl.workers.rollout.hf_rollout import HFRollout

    total = args.turns * args.tokens_per_turn
    section_args = argparse.Namespace(max_tokens=total, max_num_seqs=1024, max_prefill_tokens=8192)
    with tempfile.TemporaryDirectory() as root:
        model_dir = build_model_dir(args.model, root)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        cfg = rollout_section(section_args)
        engine = HFRollout(model, cfg, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)
        prompts = prompt_lists(tokenizer, args.conversations)
        server = build_async_server(engine, cfg)
        server.start()
        try:  # timed alternately so both sides see the same load (this CPU is shared)
            chat = ChatTokens(tokenizer)
            (single_s, single_tokens), (agent_s, agent_tokens) = timed_pair(
                lambda: one_batch_call(engine, prompts, [total] * len(prompts), True),
                lambda: agent_call(server, chat, prompts, args.turns, args.tokens_per_turn),
                args.repeats,
            )
        finally:
            server.stop()
    single_tps, agent_tps = single_tokens / single_s, agent_tokens / agent_s
    result = {
        "model": args.model, "conversations": args.conversations, "turns": args.turns,
        "tokens_per_turn": args.tokens_per_turn, "torch_threads": torch.get_num_threads(),
        "single_turn_seconds": round(single_s, 3), "single_turn_useful_tokens_per_s": round(single_tps, 1),
        "agent_seconds": round(agent_s, 3), "agent_useful_tokens_per_s": round(agent_tps, 1),
        "agent_over_single_turn": round(agent_tps / single_tps, 3), "target": TARGET_RATIO,
        "meets_target": agent_tps / single_tps >= TARGET_RATIO,
    }
    log(str(result))
    emit_json(result, args.out or None)


if __name__ == "__main__":
    main()
