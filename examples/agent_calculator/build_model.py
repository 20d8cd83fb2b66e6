"""A tiny random model whose tokenizer splits numbers into single digits, for the calculator demo.

    python examples/agent_calculator/build_model.py --output_dir outputs/agent_calculator/model

Why not ``hybridrl.models.tiny.build_tiny_model`` as is: its BPE merges digits by context
(``" 347"`` → ``" 3" "47"`` after a space, ``"347"`` → ``"34" "7"`` after a quote), so copying a number
from the question into the tool call, or from the tool's result into the answer, would mean learning a
token-to-token mapping. Here every digit is its own token, so copying is copying, and the BPE is trained
on the demo's own text, so the tool-call markup costs a few tokens instead of ~60 bytes. Everything else
(special tokens, chat template, model config) is the tiny model's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
from dataclasses import asdict, replace
from pathlib import Path

from hybridrl.models.tiny import EOS_TOKEN, PAD_TOKEN, TinyModelSpec, build_model_config, build_tokenizer

MARKER = "agent_calculator_model.json"


def _load_prepare_data():
    """``prepare_data.py`` next to this file (the examples folder is not a package)."""
    spec = importlib.util.spec_from_file_location("agent_calculator_prepare_data", Path(__file__).with_name("prepare_data.py"))
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def tokenizer_corpus(num_conversations: int, seed: int) -> list[str]:
    """Chat-rendered demo conversations (both paths), the text the tokenizer will see."""
    data = _load_prepare_data()
    rng = random.Random(seed)
    lines = []
    for a, b in data.sample_pairs(num_conversations, rng, exclude=set()):
        for message in data.sft_conversation(a, b, use_tool=rng.random() < 0.5, rng=rng):
            lines.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    return lines


def build_digit_tokenizer(vocab_size: int, seed: int):
    """Byte-level BPE with single-digit pre-tokenization, trained on the demo's text (``PreTrainedTokenizerFast``)."""
    return build_tokenizer(vocab_size, seed, corpus=tokenizer_corpus(2000, seed), split_digits=True)


def build_model(out_dir: str | Path, spec: TinyModelSpec) -> Path:
    """Write a random model + digit tokenizer to ``out_dir`` (a finished folder with the same spec is reused)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = Path(out_dir).expanduser()
    marker = out / MARKER
    if marker.exists() and json.loads(marker.read_text()) == asdict(spec):
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_digit_tokenizer(spec.tokenizer_vocab_size, spec.seed)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN), tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = build_model_config(spec, len(tokenizer), eos_id, pad_id)
    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps(asdict(spec)))
    return out


# The demo's model: 4 layers of width 128 (head_dim 32, ~0.64M parameters), big enough to learn
# positional copying in a few hundred SFT steps on 2 CPU cores.
DEMO_SPEC = replace(
    TinyModelSpec(),
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    tokenizer_vocab_size=384,
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True)
    for name, value in asdict(DEMO_SPEC).items():
        kind = (lambda s: s.lower() in ("1", "true", "yes")) if isinstance(value, bool) else type(value)
        parser.add_argument(f"--{name}", type=kind, default=value)
    args = vars(parser.parse_args(argv))
    out = args.pop("output_dir")
    print(f"model written to {build_model(out, TinyModelSpec(**args))}")


if __name__ == "__main__":
    main()
