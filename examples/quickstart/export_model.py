"""Find the quickstart's trained model and print how to use it.

``run_quickstart.sh`` trains with ``trainer.save_freq=$STEPS`` (a save at the last step only),
``actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]`` (the actor saves its full weights as a
Hugging Face folder, no per-rank shards and no optimizer state) and ``trainer.resume_mode=disable`` (every run
trains from scratch). The folder is ``<checkpoint root>/global_step_N/actor/huggingface``, N read from
``latest_checkpointed_iteration.txt``. This script checks that it holds loadable weights, links it as
``--link`` (a stable path, replaced on each run) and prints the path and a one-line command to try it.

    python examples/quickstart/export_model.py --checkpoint_dir outputs/quickstart/checkpoints/<experiment> \
        --link outputs/quickstart/models/<experiment>
"""

from __future__ import annotations

import argparse
import os
import sys

from hybridrl.utils.checkpoint import is_checkpoint_complete, read_checkpoint_tracker

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


def trained_model_dir(checkpoint_dir: str) -> str:
    """The HF folder of the actor's latest complete checkpoint under ``checkpoint_dir``.

    Raises:
        FileNotFoundError: no tracker, an incomplete checkpoint, or a checkpoint saved without ``hf_model``.
    """
    step = read_checkpoint_tracker(checkpoint_dir)
    if step is None:
        raise FileNotFoundError(f"no checkpoint under {checkpoint_dir} (no latest_checkpointed_iteration.txt); "
                                "did the training run finish?")
    actor = os.path.join(checkpoint_dir, f"global_step_{step}", "actor")
    if not is_checkpoint_complete(actor):
        raise FileNotFoundError(f"{actor} is not a complete checkpoint (the save was interrupted).")
    hf_dir = os.path.join(actor, "huggingface")
    if not any(os.path.isfile(os.path.join(hf_dir, name)) for name in WEIGHT_FILES):
        raise FileNotFoundError(
            f"{hf_dir} has no weights: the run saved without 'hf_model' in actor_rollout_ref.actor.checkpoint."
            "save_contents; merge the shards instead: python -m hybridrl.model_merger merge --backend fsdp "
            f"--local_dir {actor} --target_dir <folder>"
        )
    return hf_dir


def link_model(hf_dir: str, link: str) -> str:
    """Point the symlink ``link`` at ``hf_dir`` (replacing an older link); returns the link's absolute path."""
    link = os.path.abspath(link)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.islink(link):
        os.remove(link)
    elif os.path.exists(link):
        raise FileExistsError(f"{link} exists and is not a link; remove it or choose another --link")
    os.symlink(os.path.abspath(hf_dir), link)
    return link


def try_command(model_dir: str) -> str:
    """One line that serves the model on 127.0.0.1:8000 (OpenAI API; docs/serving.md)."""
    return (f"python -m hybridrl.serve model.path={model_dir} trainer.device=cpu rollout.name=hf "
            "rollout.dtype=float32 server.port=8000")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint_dir", required=True, help="trainer.default_local_dir of the run")
    parser.add_argument("--link", default=None, help="a stable path to link to the model folder")
    args = parser.parse_args(argv)
    try:
        model_dir = trained_model_dir(args.checkpoint_dir)
    except FileNotFoundError as error:
        print(f"[quickstart] {error}", file=sys.stderr)
        return 1
    if args.link:
        model_dir = link_model(model_dir, args.link)
    print(f"[quickstart] trained model (Hugging Face folder): {model_dir}")
    print(f"[quickstart] try it: {try_command(model_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
