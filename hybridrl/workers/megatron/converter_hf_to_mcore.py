"""HF Llama/Qwen2 folder → megatron-core dist checkpoint, for ``megatron.use_dist_checkpointing=True``.

    python -m hybridrl.workers.megatron.converter_hf_to_mcore --hf_model_path <HF folder> --output_path <folder>
    python scripts/converter_hf_to_mcore.py ...   (the same, at verl's script path)

One CPU process (gloo, TP = PP = 1): the ``GPTModel`` is built and filled exactly as a worker builds it from
the HF folder (the built-in converter, or mbridge with ``--use_mbridge``), then written with
``megatron.core.dist_checkpointing.save`` (``torch_dist`` backend). The checkpoint stores global tensors, so it loads
at any TP size. It is written to ``<output_path>.tmp-<pid>`` and renamed at the end: a folder at ``output_path`` is
complete. ``--test`` loads it back into a fresh model (hybridrl's loader) and checks every parameter bit-equal.

verl's flags are accepted: ``--use_cpu_initialization`` (always so here), ``--trust_remote_code``. Deviation: an
existing, non-empty ``output_path`` is refused (verl prints a message and skips the conversion).
"""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Any

import torch

__all__ = ["convert_hf_to_mcore", "main"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _layout(use_mbridge: bool) -> Any:
    """An ``actor.megatron``-shaped section for one process: TP = PP = CP = EP = 1."""
    from omegaconf import OmegaConf

    return OmegaConf.create(dict(
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=None,
        context_parallel_size=1, expert_model_parallel_size=1, expert_tensor_parallel_size=None,
        sequence_parallel=False, use_distributed_optimizer=False, use_mbridge=use_mbridge, seed=42,
        override_transformer_config={}, use_dist_checkpointing=False, dist_checkpointing_path=None,
    ))


def _init_single_process() -> None:
    """A one-rank gloo group (megatron-core's parallel state needs ``torch.distributed``).

    Its store is an in-process ``HashStore``: one rank needs no rendezvous, so no port is opened.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise RuntimeError("converter_hf_to_mcore runs in one process (TP = PP = 1); start it without torchrun.")
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def _model_dtype(hf_config: Any, dtype: str) -> torch.dtype:
    """``auto``: the HF config's ``torch_dtype`` (float32 when it names none)."""
    if dtype != "auto":
        return _DTYPES[dtype]
    configured = getattr(hf_config, "torch_dtype", None)
    configured = getattr(torch, configured) if isinstance(configured, str) else configured
    return configured if configured in _DTYPES.values() else torch.float32


def _check_output(output_path: str) -> None:
    if os.path.exists(output_path) and (not os.path.isdir(output_path) or os.listdir(output_path)):
        raise FileExistsError(f"--output_path {output_path!r} exists and is not an empty folder; choose a new one "
                              "(a dist checkpoint is never written over another).")


def convert_hf_to_mcore(hf_model_path: str, output_path: str, *, use_mbridge: bool = False, dtype: str = "auto",
                        trust_remote_code: bool = False, test: bool = False) -> str:
    """Write the dist checkpoint of the HF folder ``hf_model_path`` to ``output_path``; returns ``output_path``."""
    from megatron.core import dist_checkpointing
    from transformers import AutoConfig

    from hybridrl.workers.megatron.engine import build_megatron_model
    from hybridrl.workers.megatron.parallel import init_megatron_parallel

    output_path = os.path.abspath(os.path.expanduser(output_path))
    _check_output(output_path)
    _init_single_process()
    layout = _layout(use_mbridge)
    init_megatron_parallel(layout, "cpu")
    hf_config = AutoConfig.from_pretrained(hf_model_path, trust_remote_code=trust_remote_code)
    model_dtype = _model_dtype(hf_config, dtype)
    model = build_megatron_model(hf_model_path, hf_config, layout, model_dtype, "cpu")
    partial = f"{output_path}.tmp-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    dist_checkpointing.save(model.gpt.sharded_state_dict(), partial)
    if test:
        _check_round_trip(model.gpt, partial, hf_config, layout, model_dtype)
    if os.path.isdir(output_path):
        os.rmdir(output_path)  # empty (checked above)
    os.replace(partial, output_path)
    return output_path


def _check_round_trip(gpt: torch.nn.Module, path: str, hf_config: Any, layout: Any, dtype: torch.dtype) -> None:
    """A fresh model loaded from ``path`` by hybridrl's loader equals ``gpt`` bit for bit."""
    from hybridrl.workers.megatron.dist_checkpoint import load_dist_checkpoint_weights
    from hybridrl.workers.megatron.model import build_gpt_model, transformer_config

    fresh = build_gpt_model(hf_config, transformer_config(hf_config, layout, dtype, "cpu"), "cpu")
    load_dist_checkpoint_weights(fresh, path, "--output_path")
    expected = dict(gpt.named_parameters())
    for name, param in fresh.named_parameters():
        if not torch.equal(param, expected[name]):
            raise AssertionError(f"converter_hf_to_mcore --test: {name} differs after loading the checkpoint back")
    print(f"--test: {len(expected)} parameters loaded back bit-equal")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hf_model_path", required=True, help="HF Llama/Qwen2 folder (safetensors)")
    parser.add_argument("--output_path", required=True, help="new folder for the megatron-core dist checkpoint")
    parser.add_argument("--use_mbridge", action="store_true", help="convert through mbridge (default: built-in)")
    parser.add_argument("--dtype", default="auto", choices=["auto", *_DTYPES], help="stored dtype (auto: the HF "
                        "config's torch_dtype)")
    parser.add_argument("--trust_remote_code", action="store_true")
    parser.add_argument("--test", action="store_true", help="load the checkpoint back and compare every parameter")
    parser.add_argument("--use_cpu_initialization", action="store_true", help="accepted for verl (always on here)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: parse verl's flags, convert, print where the checkpoint is."""
    args = _parse_args(argv)
    path = convert_hf_to_mcore(args.hf_model_path, args.output_path, use_mbridge=args.use_mbridge, dtype=args.dtype,
                               trust_remote_code=args.trust_remote_code, test=args.test)
    print(f"megatron-core dist checkpoint written to {path}; use it with "
          f"actor_rollout_ref.actor.megatron.use_dist_checkpointing=True "
          f"actor_rollout_ref.actor.megatron.dist_checkpointing_path={path}")


if __name__ == "__main__":  # megatron-core's save starts helper processes (spawn): keep the entry guarded
    main()
