"""``POST /v1/completions``: a prompt string or token ids (or a list of either) → n choices per prompt.

A string prompt is encoded with the tokenizer's special tokens (a BOS where the model has one), as
vLLM's completions endpoint does; token-id prompts go to the engine as given. Choice ``index`` is
``prompt_index * n + i``. ``logprobs=0`` returns the sampled tokens' log-probs (no alternatives).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hybridrl.serving.choices import Choice, completion_logprobs, finish_choice, generate_choices
from hybridrl.serving.context import ServingContext, response_header, usage
from hybridrl.serving.errors import invalid_request
from hybridrl.serving.requests import COMPLETIONS_DEFAULT_MAX_TOKENS, CompletionRequest


def prompt_token_ids(tokenizer: Any, prompt: Any) -> list[list[int]]:
    """The request's prompts as id lists; 400 for an empty prompt or an id outside the tokenizer's vocabulary."""
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif prompt and all(isinstance(item, int) for item in prompt):
        prompts = [list(prompt)]
    else:
        prompts = list(prompt)
    if not prompts:
        raise invalid_request("'prompt' is empty", "prompt")
    vocab_size = len(tokenizer)
    encoded = []
    for index, item in enumerate(prompts):
        ids = list(tokenizer.encode(item)) if isinstance(item, str) else list(item)
        if not ids:
            raise invalid_request(f"prompt {index} has no tokens", "prompt")
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise invalid_request(f"prompt {index} has token ids outside [0, {vocab_size})", "prompt")
        encoded.append(ids)
    return encoded


def _choice_object(context: ServingContext, choice: Choice, logprobs: bool) -> dict[str, Any]:
    return {
        "index": choice.index,
        "text": choice.text,
        "logprobs": completion_logprobs(context.tokenizer, choice) if logprobs else None,
        "finish_reason": choice.finish_reason,
    }


async def text_completion(context: ServingContext, body: CompletionRequest, trajectory_id: str) -> dict[str, Any]:
    """The text completion object for ``body`` (every returned choice recorded under ``trajectory_id``)."""
    requested = context.check_request(body, body.max_tokens, "max_tokens")
    default = min(COMPLETIONS_DEFAULT_MAX_TOKENS, context.limits.max_tokens)  # OpenAI's, within the server's limit
    stop, want_logprobs = body.stop_strings(), body.logprobs is not None
    prompts = prompt_token_ids(context.tokenizer, body.prompt)
    max_tokens = min(context.fit_prompt(ids, "prompt", requested, "max_tokens", default) for ids in prompts)
    params = context.sampling_params(body, max_tokens, want_logprobs)
    per_prompt = await asyncio.gather(
        *(generate_choices(context.generate, trajectory_id, ids, params, body.n) for ids in prompts)
    )
    choices: list[Choice] = []
    for prompt_index, (ids, outputs) in enumerate(zip(prompts, per_prompt)):
        for i, output in enumerate(outputs):
            choice = finish_choice(prompt_index * body.n + i, output, context.tokenizer, stop, parser=None)
            context.record(trajectory_id, ids, choice)
            choices.append(choice)
    return {
        **response_header("cmpl", context.model_name, "text_completion"),
        "choices": [_choice_object(context, choice, want_logprobs) for choice in choices],
        "usage": usage(sum(len(ids) for ids in prompts), choices),
    }
