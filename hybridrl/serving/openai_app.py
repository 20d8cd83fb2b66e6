"""An OpenAI-compatible HTTP API (FastAPI) over one ``generate`` coroutine (an async rollout server's).

    GET  /v1/models                 the one served model
    POST /v1/chat/completions       chat.py        (messages, tools, n, logprobs, stop, seed, stream, ...)
    POST /v1/completions            completions.py (prompt string or token ids)
    GET  /health                    200 while the app runs (no API key needed)

Each request belongs to a trajectory: the ``X-Trajectory-Id`` header, else the body's ``user``, else
``metadata.trajectory_id``, else a fresh id. It is the ``request_id`` given to ``generate`` (so a
conversation's turns reach the same server), the key under which the ``recorder`` gets every returned
choice, and it is echoed in the response's ``X-Trajectory-Id`` header.

Safety: the body is read up to ``limits.max_request_bytes`` (413 beyond); with ``api_key`` every ``/v1``
route needs ``Authorization: Bearer <api_key>`` (401); ``max_tokens``, ``n``, the prompt length and the
model's context are bounded by ``limits`` (400); past ``limits.max_inflight_sequences`` sequences being
generated a request gets a 429 with ``Retry-After``; a request whose client disconnects has its generation
cancelled (``admission.py``). Errors are OpenAI error objects (``errors.py``).
"""

from __future__ import annotations

import hmac
import json
import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from hybridrl.generation.tool_parser import ToolParser
from hybridrl.serving.admission import Admission, until_disconnected
from hybridrl.serving.chat import chat_completion
from hybridrl.serving.completions import text_completion
from hybridrl.serving.context import ServingContext
from hybridrl.serving.errors import OpenAIError, from_validation_error, install_error_handlers, invalid_request
from hybridrl.serving.prompts import PromptRenderer
from hybridrl.serving.requests import ChatCompletionRequest, CompletionRequest
from hybridrl.serving.streaming import chat_chunks, completion_chunks, sse_response
from hybridrl.serving.types import CompletionRecorder, GenerateFn, ServeLimits

TRAJECTORY_HEADER = "X-Trajectory-Id"


def build_openai_app(
    generate: GenerateFn,
    tokenizer: Any,
    *,
    model_name: str,
    limits: ServeLimits,
    api_key: str | None = None,
    tool_format: str = "hermes",
    chat_template_kwargs: dict | None = None,
    recorder: CompletionRecorder | None = None,
    renderer: PromptRenderer | None = None,
    accept_any_model: bool = False,
) -> FastAPI:
    """The FastAPI app serving ``model_name`` through ``generate`` (see the module docstring).

    Args:
        generate: ``async (request_id, *, prompt_ids, sampling_params) -> TokenOutput``, e.g.
            ``AsyncRolloutServer.generate`` or ``AsyncLLMServerManager.generate``; the caller starts and
            stops what is behind it.
        tokenizer: the model's Hugging Face tokenizer (chat template, decoding).
        model_name: the id clients pass as ``model`` (another id is a 404).
        limits: request bounds.
        api_key: when set, the Bearer token every ``/v1`` request must carry.
        tool_format: tool-call format of the model's responses (``ToolParser`` name, e.g. ``hermes``).
        chat_template_kwargs: extra chat-template variables for every request (a request's own
            ``chat_template_kwargs`` are merged over them).
        recorder: receives every returned choice with its token ids (``types.CompletionRecorder``).
        renderer: turns chat messages into prompt ids (default: a ``PromptRenderer`` over ``chat_template_kwargs``;
            training passes a ``continuation.ContinuationRenderer``, which continues a trajectory from its tokens).
        accept_any_model: answer requests for any ``model`` name (the training endpoint: an agent written for
            another deployment keeps its model name).

    Raises:
        ValueError: an unknown ``tool_format``, or a chat template ``ChatTokens`` cannot use.
    """
    template_kwargs = dict(chat_template_kwargs or {})
    context = ServingContext(
        generate=generate,
        tokenizer=tokenizer,
        model_name=model_name,
        limits=limits,
        chat_template_kwargs=template_kwargs,
        recorder=recorder,
        renderer=renderer if renderer is not None else PromptRenderer(tokenizer, template_kwargs),
        accept_any_model=accept_any_model,
        tool_parser=ToolParser.get_tool_parser(tool_format, tokenizer),
        admission=Admission(limits.max_inflight_sequences),
    )
    app = FastAPI(title=f"hybridrl OpenAI-compatible API ({model_name})")
    install_error_handlers(app)
    app.include_router(_api_router(context, api_key))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _api_key_check(api_key: str | None):
    """A dependency answering 401 unless the request carries ``Authorization: Bearer <api_key>``."""

    async def check(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise OpenAIError(
                401,
                "Incorrect or missing API key: send 'Authorization: Bearer <key>' with the server's server.api_key",
                code="invalid_api_key",
            )

    return check


def _api_router(context: ServingContext, api_key: str | None) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(_api_key_check(api_key))])
    created = int(time.time())

    def model_card() -> dict[str, Any]:
        return {"id": context.model_name, "object": "model", "created": created, "owned_by": "hybridrl"}

    @router.get("/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @router.get("/models/{model:path}")
    async def get_model(model: str) -> dict[str, Any]:
        context.check_model(model)
        return model_card()

    @router.post("/chat/completions")
    async def chat(request: Request) -> Any:
        body = await _parse(request, ChatCompletionRequest, context.limits.max_request_bytes)
        trajectory_id = trajectory_id_of(request, body)
        with context.admission.hold(body.n):
            response = await until_disconnected(request.receive, chat_completion(context, body, trajectory_id))
        return _respond(response, body.stream, trajectory_id, chat_chunks, body.include_usage())

    @router.post("/completions")
    async def completions(request: Request) -> Any:
        body = await _parse(request, CompletionRequest, context.limits.max_request_bytes)
        trajectory_id = trajectory_id_of(request, body)
        with context.admission.hold(body.n * body.prompt_count()):
            response = await until_disconnected(request.receive, text_completion(context, body, trajectory_id))
        return _respond(response, body.stream, trajectory_id, completion_chunks, body.include_usage())

    return router


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, 413 as soon as it exceeds ``max_bytes`` (declared or streamed)."""
    too_large = OpenAIError(
        413, f"the request body exceeds {max_bytes} bytes (server.max_request_bytes)", code="request_too_large"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _parse(request: Request, model: type[BaseModel], max_bytes: int) -> Any:
    """The body as ``model``: 413 too large, 400 for bad JSON or invalid fields."""
    raw = await read_body(request, max_bytes)
    try:
        payload = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise invalid_request(f"the request body is not valid JSON: {error}") from None
    if not isinstance(payload, dict):
        raise invalid_request(f"the request body must be a JSON object, got {type(payload).__name__}")
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise from_validation_error(error) from None


def trajectory_id_of(request: Request, body: Any) -> str:
    """``X-Trajectory-Id`` header, else ``user``, else ``metadata.trajectory_id``, else a fresh id."""
    candidates = (request.headers.get(TRAJECTORY_HEADER), body.user, (body.metadata or {}).get("trajectory_id"))
    return next((str(value) for value in candidates if value), f"traj-{uuid.uuid4().hex}")


def _respond(response: dict[str, Any], stream: bool, trajectory_id: str, to_chunks: Any, include_usage: bool) -> Any:
    headers = {TRAJECTORY_HEADER: trajectory_id}
    if stream:
        return sse_response(to_chunks(response, include_usage), headers)
    return JSONResponse(response, headers=headers)
