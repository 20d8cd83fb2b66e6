"""Cross-pool weight transfer on CPU: the actor's weights → Ray's object store → a rollout engine in another process.

For each bucket size (``--bucket-mb``, i.e. ``actor_rollout_ref.rollout.update_weights_bucket_megabytes``) a fresh
publisher process (the fp32 "actor", a plain HF model) and a fresh receiver process (a standalone hf engine in
``--dtype``, as a rollout-only worker holds) run ``--repeats`` syncs; per sync:

- ``pack_s``: publisher: gather + cast + pack + checksum + ``ray.put`` of every bucket (``WeightPackage.pack_s``);
- ``transfer_s``: receiver: ``ray.get`` of the buckets (``rollout/weight_transfer_s``);
- ``load_s``: receiver: checksums + ``engine.update_weights`` + sampled-value verification (sync − transfer);
- ``publisher_peak_mb`` / ``receiver_peak_mb``: peak growth of each process's private heap during the call
  (object-store shared memory excluded: it is counted once, as ``mb``).

``unbucketed`` is one bucket holding the whole model; ``naive`` is the baseline without hybridrl's packing: one
``ray.put`` of the ``{name: tensor}`` dict, ``ray.get``, ``update_weights``, no checks.

    python scripts/bench/bench_weight_transfer.py --model-dir ~/.cache/hybridrl/smollm2-135m-instruct \
        --bucket-mb 16,64,512 --out weight_transfer.json
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import emit_json, log, summarize  # noqa: E402

_MB = 1024 * 1024
_UNBUCKETED_MB = 1 << 20  # larger than any model here: one bucket


def _anonymous_mb() -> float:
    """Private heap memory of this process (``Anonymous`` of smaps_rollup): excludes the object store's shared
    memory, which ``ray.put`` writes and ``ray.get`` maps (RSS would count those pages in both processes)."""
    with open("/proc/self/smaps_rollup") as fp:
        for line in fp:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class PeakMemory:
    """Peak of :func:`_anonymous_mb` above its value at entry, sampled every 5 ms in a thread."""

    def __enter__(self) -> PeakMemory:
        self.start_mb, self.peak_mb, self._done = _anonymous_mb(), 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak_mb = max(self.peak_mb, _anonymous_mb() - self.start_mb)

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


class Publisher:
    """The actor side: a plain fp32 HF model (FSDP's gather is the identity at world size 1)."""

    def __init__(self, model_dir: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    def publish(self, version: int, bucket_mb: int, dtype: str):
        from hybridrl.workers.rollout.hf_rollout import resolve_dtype
        from hybridrl.workers.sharding_manager.weight_sync import iter_full_state_dict
        from hybridrl.workers.sharding_manager.weight_transfer import publish_state_dict

        with PeakMemory() as memory:
            package = publish_state_dict(
                iter_full_state_dict(self.model),
                version=version,
                engine_dtype=resolve_dtype(dtype),
                bucket_bytes=bucket_mb * _MB,
                is_publisher=True,
            )
        return package, memory.peak_mb

    def publish_naive(self, dtype: str):
        import ray

        from hybridrl.workers.rollout.hf_rollout import resolve_dtype

        start = time.perf_counter()
        with PeakMemory() as memory:
            state = {name: tensor.to(resolve_dtype(dtype)) for name, tensor in self.model.state_dict().items()}
            refs = [ray.put(state)]
            del state
        return refs, time.perf_counter() - start, memory.peak_mb


class Receiver:
    """The rollout side: a standalone hf engine that loaded ``model_dir`` itself."""

    def __init__(self, model_dir: str, dtype: str) -> None:
        from omegaconf import OmegaConf
        from transformers import AutoConfig, AutoTokenizer

        from hybridrl.utils.config_defaults import section_with_defaults
        from hybridrl.workers.rollout import build_rollout

        section = OmegaConf.create({"name": "hf", "dtype": dtype, "tensor_model_parallel_size": 1})
        self.engine = build_rollout(
            section_with_defaults(section, "actor_rollout_ref.rollout"),
            section_with_defaults(OmegaConf.create({"path": model_dir}), "actor_rollout_ref.model"),
            tokenizer=AutoTokenizer.from_pretrained(model_dir),
            hf_config=AutoConfig.from_pretrained(model_dir),
            actor_module=None,
            device_name="cpu",
        )

    def receive(self, package) -> dict[str, float]:
        from hybridrl.workers.sharding_manager.weight_transfer import receive_package

        with PeakMemory() as memory:
            metrics = receive_package(self.engine, package, engine_name="hf")
        return {**metrics, "peak_mb": memory.peak_mb}

    def receive_naive(self, refs: list) -> dict[str, float]:
        import ray

        start = time.perf_counter()
        with PeakMemory() as memory:
            state = ray.get(refs[0])
            fetched = time.perf_counter()
            self.engine.update_weights(state.items())
            del state
        sync_s = time.perf_counter() - start
        return {
            "rollout/weight_transfer_s": fetched - start,
            "rollout/weight_sync_s": sync_s,
            "peak_mb": memory.peak_mb,
        }


def run_config(ray, args, bucket_mb: int | None) -> dict:
    """``--repeats`` syncs (after one warm-up) with fresh processes; ``bucket_mb=None``: the naive baseline."""
    publisher = ray.remote(Publisher).remote(args.model_dir)
    receiver = ray.remote(Receiver).remote(args.model_dir, args.dtype)
    keys = ("pack_s", "transfer_s", "load_s", "total_s", "publisher_peak_mb", "receiver_peak_mb")
    samples: dict[str, list[float]] = {key: [] for key in keys}
    buckets, total_mb = 1, None
    for version in range(1 + args.repeats):
        start = time.perf_counter()
        if bucket_mb is None:
            refs, pack_s, publisher_mb = ray.get(publisher.publish_naive.remote(args.dtype))
            metrics = ray.get(receiver.receive_naive.remote(refs))
        else:
            package, publisher_mb = ray.get(publisher.publish.remote(version, bucket_mb, args.dtype))
            metrics = ray.get(receiver.receive.remote(package))
            pack_s, buckets, total_mb = package.pack_s, len(package.bucket_refs), package.total_mb
            del package
        total_s = time.perf_counter() - start
        if version == 0:
            continue  # warm-up
        transfer_s = metrics["rollout/weight_transfer_s"]
        samples["pack_s"].append(pack_s)
        samples["transfer_s"].append(transfer_s)
        samples["load_s"].append(metrics["rollout/weight_sync_s"] - transfer_s)
        samples["total_s"].append(total_s)
        samples["publisher_peak_mb"].append(publisher_mb)
        samples["receiver_peak_mb"].append(metrics["peak_mb"])
    result = {key: summarize(values)["median"] for key, values in samples.items()}
    result.update(bucket_mb=bucket_mb, buckets=buckets, mb=total_mb)
    ray.kill(publisher)
    ray.kill(receiver)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_model = os.path.expanduser("~/.cache/hybridrl/smollm2-135m-instruct")
    parser.add_argument(
        "--model-dir", default=default_model, help="HF model folder (examples/quickstart/prepare_model.py)"
    )
    parser.add_argument("--bucket-mb", default="16,64,512", help="comma-separated bucket sizes in MB")
    parser.add_argument("--dtype", default="bfloat16", help="rollout.dtype of the engine")
    parser.add_argument("--repeats", type=int, default=3, help="timed syncs per configuration (after 1 warm-up)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.model_dir, "config.json")):
        raise SystemExit(f"--model-dir {args.model_dir} has no config.json; run examples/quickstart/prepare_model.py")
    import ray

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    configs: list[tuple[str, int | None]] = [(f"{mb}MB", int(mb)) for mb in args.bucket_mb.split(",")]
    configs += [("unbucketed", _UNBUCKETED_MB), ("naive_state_dict", None)]
    rows = {}
    for label, bucket_mb in configs:
        log(f"{label} ...")
        rows[label] = run_config(ray, args, bucket_mb)
        log(f"{label}: {rows[label]}")
    ray.shutdown()
    emit_json({"model_dir": args.model_dir, "dtype": args.dtype, "repeats": args.repeats, "results": rows}, args.out)


if __name__ == "__main__":
    main()
