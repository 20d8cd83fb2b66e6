"""Generation's contract, shared by every path that asks an engine for tokens.

    sync rollout ──── rollout config + meta_info ────────────┐
    agent loop ─── {max_tokens, seed, meta_info: call layer} ┤
    OpenAI endpoint ── the client's request values ──────────┼─► resolve_sampling ─► RequestParams ─► engine
    async server ──── any request dict (REQUEST_KEYS) ───────┘      (sampling.py)     (records.py)      │
                                                                                                     ▼
                                                                                       TokenOutput (records.py)

- ``records.py``: ``SamplingParams`` (engine-neutral), ``RequestParams`` (one resolved request, with optional
  multimodal inputs, routed-expert records and a policy version), ``TokenOutput``, ``REQUEST_KEYS``.
- ``sampling.py``: ``resolve_sampling``, the one place sampling settings are worked out (config → call →
  request → validation → greedy), ``collect_eos_token_ids``, ``trajectory_seed``.
- ``chat_tokens.py``: ``ChatTokens``, the token-in/token-out bookkeeping of a chat conversation.
- ``tool_parser.py``: ``ToolParser``, its registry and ``hermes``; ``tool_formats/``: the other model families' formats.

It imports neither the workers, the trainer, the agent loops (``hybridrl.experimental``) nor the OpenAI server
(``hybridrl.serving``): they all build on it.
"""

from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.generation.records import REQUEST_KEYS, RequestParams, SamplingParams, TokenOutput, check_prompt_ids
from hybridrl.generation.sampling import (
    CALL_LAYER_KEYS,
    call_layer,
    call_sampling_params,
    collect_eos_token_ids,
    resolve_request_params,
    resolve_sampling,
    resolve_sampling_params,
    trajectory_seed,
)
from hybridrl.generation.tool_parser import FunctionCall, HermesToolParser, ToolParser

__all__ = [
    "CALL_LAYER_KEYS",
    "REQUEST_KEYS",
    "ChatTokens",
    "FunctionCall",
    "HermesToolParser",
    "RequestParams",
    "SamplingParams",
    "TokenOutput",
    "ToolParser",
    "call_layer",
    "call_sampling_params",
    "check_prompt_ids",
    "collect_eos_token_ids",
    "resolve_request_params",
    "resolve_sampling",
    "resolve_sampling_params",
    "trajectory_seed",
]
