"""``scripts/init_random_model.py``: the command-line builder of tiny models (sizes from flags, offline load)."""

import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "init_random_model.py"


def test_script_builds_a_tied_llama_of_the_requested_size_that_loads_offline(tmp_path):
    out = tmp_path / "tiny-llama"
    flags = ["--arch", "llama", "--hidden_size", "96", "--num_attention_heads", "3", "--num_key_value_heads", "1",
             "--num_hidden_layers", "3", "--intermediate_size", "160", "--tie_word_embeddings", "true"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--output_dir", str(out), *flags],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    config = model.config
    assert (config.model_type, config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
            config.num_hidden_layers, config.intermediate_size) == ("llama", 96, 3, 1, 3, 160)
    assert config.hidden_size // config.num_attention_heads == 32  # head_dim the vLLM CPU kernels accept
    assert config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "1 + 2"}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
    with torch.no_grad():
        assert model(torch.tensor([prompt])).logits.shape == (1, len(prompt), len(tokenizer))
