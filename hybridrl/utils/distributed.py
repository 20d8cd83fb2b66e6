"""torch.distributed set-up for workers of a worker group.

The worker group puts ``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in every
worker's environment; a worker calls ``init_distributed(self.device_name)`` (usually in
``init_model``) to form the group. Backends follow verl: ``gloo`` on CPU; on CUDA
``cpu:gloo,cuda:nccl`` so that CPU tensors (e.g. object gathers) work beside NCCL collectives.
The FSDP workers call ``init_worker_distributed``, which also gives a lone process (a notebook, a unit
test) a 1-rank group.

The rendezvous store (a ``TCPStore`` served by rank 0 on ``MASTER_PORT``) listens on ``MASTER_ADDR`` only:
torch's own ``env://`` store listens on every interface, unauthenticated, whatever ``MASTER_ADDR`` says. On a
local cluster ``MASTER_ADDR`` is 127.0.0.1, so nothing outside the machine can reach it. Under torchrun the
launcher's agent serves the store and the ranks join it as clients (``TORCHELASTIC_USE_AGENT_STORE``).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from hybridrl.utils.cuda_attention import configure_sdpa_backends
from hybridrl.utils.device import get_device_name
from hybridrl.utils.ports import free_port

_REQUIRED_ENV = ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")
# verl's default actor_rollout_ref.nccl_timeout (seconds)
DEFAULT_TIMEOUT_S = 600.0


def backend_for_device(device: str) -> str:
    """``gloo`` for ``cpu``; ``cpu:gloo,cuda:nccl`` for ``cuda``."""
    if device == "cpu":
        return "gloo"
    if device == "cuda":
        return "cpu:gloo,cuda:nccl"
    raise ValueError(f"device {device!r} is not supported; use 'cpu' or 'cuda' (trainer.device)")


def init_distributed(device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S, backend: str | None = None) -> None:
    """Join the process group described by the environment (no-op if already joined).

    Args:
        device: ``"cpu"`` or ``"cuda"`` (a Worker's ``device_name``).
        timeout_s: collective timeout.
        backend: override the backend chosen from ``device``.

    Raises:
        RuntimeError: if a rendezvous variable is missing, or an existing group has another world size.
    """
    missing = [key for key in _REQUIRED_ENV if not os.environ.get(key)]
    if missing:
        raise RuntimeError(
            f"init_distributed: environment variables {missing} are not set; they are set by the worker group "
            "(RayWorkerGroup) for each worker, or by torchrun"
        )
    world_size = int(os.environ["WORLD_SIZE"])
    if device == "cuda":
        configure_sdpa_backends()  # cuDNN attention's backward is wrong on Hopper for some masks (cuda_attention.py)
    if dist.is_initialized():
        if dist.get_world_size() != world_size:
            raise RuntimeError(f"a process group of size {dist.get_world_size()} exists; WORLD_SIZE is {world_size}")
        return
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    rank, timeout = int(os.environ["RANK"]), timedelta(seconds=timeout_s)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's agent already serves the store
        rendezvous: dict = {"init_method": "env://"}
    else:
        store = rendezvous_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), rank, world_size, timeout)
        rendezvous = {"store": store}
    dist.init_process_group(
        backend=backend or backend_for_device(device), rank=rank, world_size=world_size, timeout=timeout, **rendezvous
    )


def rendezvous_store(master_addr: str, master_port: int, rank: int, world_size: int, timeout: timedelta) -> dist.Store:
    """The group's ``TCPStore``: rank 0 serves it on ``master_addr:master_port`` only, the other ranks connect.

    torch's ``TCPStore`` server binds every interface; handing it a socket already listening on
    ``master_addr`` (``master_listen_fd``) keeps it there (127.0.0.1 on a local cluster).
    """
    if rank != 0:
        return dist.TCPStore(master_addr, master_port, world_size, is_master=False, timeout=timeout)
    family, _, _, _, address = socket.getaddrinfo(master_addr, master_port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen()
    except OSError:
        listener.close()
        raise
    # the store owns the descriptor from here on (detach: closing the Python socket must not close it)
    return dist.TCPStore(
        master_addr, master_port, world_size, is_master=True, timeout=timeout, master_listen_fd=listener.detach()
    )


def init_worker_distributed(device_name: str) -> int:
    """Join the worker group's process group (env ``WORLD_SIZE/RANK/MASTER_ADDR/MASTER_PORT``); return the world size.

    verl initialises torch.distributed in the worker constructor; a single process without the
    rendezvous variables (a notebook, a unit test) gets a 1-rank group on a free local port.
    """
    if not dist.is_initialized():
        if "MASTER_PORT" not in os.environ and os.environ.get("WORLD_SIZE", "1") == "1":
            os.environ.update(WORLD_SIZE="1", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        init_distributed(device_name)
    return dist.get_world_size()


def destroy_distributed() -> None:
    """Leave the process group if this process is in one."""
    if dist.is_initialized():
        dist.destroy_process_group()


# verl 0.5's names for the same set-up, for code written against verl.utils.distributed.
def initialize_global_process_group(timeout_second: float = 36000) -> tuple[int, int, int]:
    """:func:`init_distributed` on this process's device; returns ``(local_rank, rank, world_size)``."""
    init_distributed(get_device_name(), timeout_s=timeout_second)
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


destroy_global_process_group = destroy_distributed
