"""OpenAI error objects: ``{"error": {"message", "type", "param", "code"}}`` with the matching HTTP status.

400 invalid_request_error   bad JSON, a field of the wrong type/range, max_tokens over the limit, prompt too long
401 invalid_request_error   missing or wrong API key (code ``invalid_api_key``)
404 invalid_request_error   unknown model (code ``model_not_found``) or route
413 invalid_request_error   body over ``server.max_request_bytes`` (code ``request_too_large``)
429 rate_limit_error        more sequences in flight than ``server.max_inflight_sequences`` (code ``server_busy``,
                            with a ``Retry-After`` header)
500 server_error            the rollout engine failed
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)


class OpenAIError(Exception):
    """An error answered as an OpenAI error object with HTTP ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # noqa: A002 - OpenAI's field name
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """A 400 about the request's content."""
    return OpenAIError(400, message, param=param, code=code)


def from_validation_error(error: ValidationError | RequestValidationError) -> OpenAIError:
    """A 400 naming the first invalid field (``messages.0.role``) and pydantic's reason."""
    first = error.errors()[0]
    location = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(location) or None
    where = f"'{param}': " if param else ""
    reason = str(first.get("msg", "invalid value")).removeprefix("Value error, ")  # a validator's own message
    return invalid_request(f"{where}{reason}", param=param)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` as an OpenAI error object (also Starlette's 404/405 and crashes)."""

    @app.exception_handler(OpenAIError)
    async def _openai(_: Request, error: OpenAIError) -> JSONResponse:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, error: RequestValidationError) -> JSONResponse:
        return from_validation_error(error).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, error: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if error.status_code == 404 else None
        return OpenAIError(error.status_code, str(error.detail), code=code).response()

    @app.exception_handler(Exception)
    async def _crash(_: Request, error: Exception) -> JSONResponse:
        logger.exception("openai endpoint: unhandled error")
        return OpenAIError(500, f"internal error: {type(error).__name__}: {error}", type="server_error").response()
