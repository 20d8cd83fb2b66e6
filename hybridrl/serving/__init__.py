"""OpenAI-compatible serving over hybridrl's rollout engines (``python -m hybridrl.serve``).

    app = build_openai_app(server.generate, tokenizer, model_name="m", limits=ServeLimits(...))
    uvicorn.run(app, host="127.0.0.1", port=8000)

``openai_app.py`` builds the FastAPI app and its routes; ``chat.py`` / ``completions.py`` turn requests
into engine calls; ``choices.py`` finishes the engine's outputs (stop strings, tool calls, log-probs);
``streaming.py`` re-sends a finished response as SSE chunks; ``types.py`` holds the limits and the
records a ``CompletionRecorder`` receives.
"""

from hybridrl.serving.openai_app import TRAJECTORY_HEADER, build_openai_app
from hybridrl.serving.types import CompletionRecord, CompletionRecorder, GenerateFn, ServeLimits

__all__ = [
    "TRAJECTORY_HEADER",
    "CompletionRecord",
    "CompletionRecorder",
    "GenerateFn",
    "ServeLimits",
    "build_openai_app",
]
