"""Build tiny Hugging Face causal LMs with a locally trained tokenizer (no hub access needed).

The folder written by :func:`build_tiny_model` loads offline with ``AutoModelForCausalLM`` and
``AutoTokenizer`` and carries a Qwen-style chat template, so it can stand in for a real chat model
in tests, demos and CI.

Defaults keep ``head_dim = hidden_size / num_attention_heads = 32``: vLLM's CPU attention kernels
reject head_dim 16, and tests share these models with the vLLM rollout.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|pad|>"

# Qwen-style template: a system turn is optional; the generation prompt opens an assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_WORDS = (
    "what is the answer to plus minus times sum of and result number think step question "
    "solve compute give just only with a an please user assistant system you are helpful "
    "countdown using numbers make equation target reach final yes no true false hello world"
).split()


@dataclass(frozen=True)
class TinyModelSpec:
    """Architecture of a tiny model. ``arch`` is ``qwen2`` or ``llama``."""

    arch: str = "qwen2"
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    max_position_embeddings: int = 1024
    tie_word_embeddings: bool = True
    tokenizer_vocab_size: int = 512
    seed: int = 0


def _corpus(num_lines: int, seed: int) -> list[str]:
    """Arithmetic questions/answers and common words, so numbers tokenize compactly."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_lines):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice(["+", "-", "*"])
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 8)))
        lines.append(f"What is {a} {op} {b}? {words} The answer is {value}. #### {value}")
        lines.append(f"user\n{words}\nassistant\n{value}")
    return lines


def build_tokenizer(vocab_size: int = 512, seed: int = 0, corpus: Iterable[str] | None = None,
                    split_digits: bool = False):
    """Train a byte-level BPE tokenizer and wrap it as a ``PreTrainedTokenizerFast``.

    Args:
        corpus: the training text (default: arithmetic lines and common words drawn with ``seed``).
        split_digits: one token per digit (numbers are then copied digit by digit; the calculator demo uses it).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    digits = [pre_tokenizers.Digits(individual_digits=True)] if split_digits else []
    tok.pre_tokenizer = pre_tokenizers.Sequence([*digits, byte_level]) if digits else byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(4000, seed) if corpus is None else corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|endoftext|>", "<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model_config(spec: TinyModelSpec, vocab_size: int, eos_id: int, pad_id: int):
    """Return a ``Qwen2Config`` or ``LlamaConfig`` for ``spec``."""
    from transformers import LlamaConfig, Qwen2Config

    config_cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}.get(spec.arch)
    if config_cls is None:
        raise ValueError(f"--arch must be 'qwen2' or 'llama', got {spec.arch!r}")
    return config_cls(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
        torch_dtype="float32",
    )


def build_tiny_model(out_dir: str | Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write a randomly initialised model + tokenizer + generation config to ``out_dir``.

    Re-running with the same spec into an existing complete folder is a no-op (cached).
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = Path(out_dir).expanduser()
    marker = out / "hybridrl_tiny_spec.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(spec):
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.tokenizer_vocab_size, spec.seed)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = build_model_config(spec, len(tokenizer), eos_id, pad_id)
    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps(asdict(spec)))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build a tiny random HF causal LM with a local tokenizer.")
    parser.add_argument("--output_dir", "--output-dir", required=True)
    defaults = TinyModelSpec()
    for name, value in asdict(defaults).items():
        kind = (lambda s: s.lower() in ("1", "true", "yes")) if isinstance(value, bool) else type(value)
        parser.add_argument(f"--{name}", type=kind, default=value)
    args = vars(parser.parse_args(argv))
    out = args.pop("output_dir")
    path = build_tiny_model(out, TinyModelSpec(**args))
    print(f"tiny model written to {path}")


if __name__ == "__main__":
    main()
