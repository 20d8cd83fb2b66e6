"""The vLLM engine's async server: requests go straight into the in-process engine's own continuous batching.

``VLLMRollout.llm`` is an offline ``vllm.LLM``; its ``llm_engine`` (V1 ``LLMEngine``, in this process with
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` on CPU) schedules requests itself: ``add_request`` queues one,
``step()`` runs one scheduler iteration and returns outputs, ``has_unfinished_requests()`` says whether to
keep stepping. Each request gets its own ``vllm.SamplingParams`` (``vllm_rollout.to_vllm_sampling_kwargs``
plus ``seed`` and final-only output) and the LoRA request of the served adapter, if any.
"""

from __future__ import annotations

from typing import Any

from hybridrl.generation.records import RequestParams, TokenOutput
from hybridrl.workers.rollout.async_server.engine_loop import ServerRequest, StepEngine
from hybridrl.workers.rollout.vllm_rollout import to_vllm_sampling_kwargs

# vLLM's CompletionOutput.finish_reason → the server's stop_reason
_STOP_REASONS = {"stop": "stop", "length": "length", "abort": "aborted"}


def vllm_sampling_kwargs(params: RequestParams) -> dict[str, Any]:
    """``vllm.SamplingParams`` kwargs of one request (without ``output_kind``, which needs vLLM's enum)."""
    kwargs = to_vllm_sampling_kwargs(params.sampling)
    if params.seed is not None and not params.sampling.greedy:
        kwargs["seed"] = params.seed
    return kwargs


def parse_vllm_output(output: Any, want_log_probs: bool) -> TokenOutput:
    """A finished ``RequestOutput`` (one completion) → ``TokenOutput``.

    ``completion.logprobs`` is one ``{token_id: Logprob}`` dict per generated token (``logprobs=0``: the
    sampled token only).
    """
    completion = output.outputs[0]
    token_ids = [int(t) for t in completion.token_ids]
    log_probs = None
    if want_log_probs:
        log_probs = [float(step[token].logprob) for step, token in zip(completion.logprobs, token_ids)]
    reason = _STOP_REASONS.get(str(completion.finish_reason), "stop")
    return TokenOutput(token_ids, log_probs, reason)


class VLLMStepEngine(StepEngine):
    """``StepEngine`` over a ``VLLMRollout`` (its ``llm.llm_engine`` and optional ``adapter.request``)."""

    def __init__(self, rollout: Any) -> None:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        self.rollout = rollout
        self.engine = rollout.llm.llm_engine
        self._final_only = RequestOutputKind.FINAL_ONLY
        self._sampling_params_cls = SamplingParams
        self._running: dict[str, ServerRequest] = {}

    def add(self, request: ServerRequest) -> None:
        kwargs = vllm_sampling_kwargs(request.params)
        sampling = self._sampling_params_cls(**kwargs, output_kind=self._final_only)
        adapter = getattr(self.rollout, "adapter", None)
        lora_request = adapter.request if adapter is not None else None
        self.engine.add_request(
            request.key, {"prompt_token_ids": list(request.prompt_ids)}, sampling, lora_request=lora_request
        )
        self._running[request.key] = request

    def step(self) -> list[tuple[ServerRequest, TokenOutput]]:
        cancelled = [key for key, request in self._running.items() if request.future.cancelled()]
        if cancelled:
            self.engine.abort_request(cancelled)
            for key in cancelled:
                self._running.pop(key)
        finished = []
        for output in self.engine.step():
            if not output.finished:
                continue
            request = self._running.pop(output.request_id, None)
            if request is not None:
                finished.append((request, parse_vllm_output(output, request.params.sampling.calculate_log_probs)))
        return finished

    def has_work(self) -> bool:
        return bool(self._running) or self.engine.has_unfinished_requests()

    def reset(self) -> list[ServerRequest]:
        dropped = list(self._running.values())
        self._running.clear()
        try:
            self.engine.abort_request([request.key for request in dropped])
        except Exception:  # noqa: BLE001 - the engine is already broken; its error reaches the callers
            pass
        return dropped
