"""How a worker failure is described: a host-memory kill by Ray's memory monitor names the hybridrl keys to change."""

from __future__ import annotations

from ray.exceptions import OutOfMemoryError, RayError

from hybridrl.single_controller.ray.errors import _describe_failure

RAY_OOM_REPORT = (
    "Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 127.0.0.1) where the lease was running was 22.81GB / 24.00GB (0.95), which exceeds "
    "the memory usage threshold of 0.95."
)


def test_a_host_oom_kill_names_the_micro_batch_and_checkpointing_keys():
    for error in (OutOfMemoryError(RAY_OOM_REPORT), RayError(RAY_OOM_REPORT)):
        text = _describe_failure(error)
        assert text.startswith("the node ran out of host memory")
        for key in ("ppo_micro_batch_size_per_gpu", "enable_gradient_checkpointing", "data.max_response_length"):
            assert key in text
        assert "22.81GB / 24.00GB" in text  # Ray's own report is kept


def test_other_failures_get_no_memory_hint():
    text = _describe_failure(RayError("connection reset"))
    assert "host memory" not in text and "connection reset" in text
