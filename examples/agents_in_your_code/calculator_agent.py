"""A calculator agent written with the ``openai`` package and the standard library only (no hybridrl import).

It is the kind of agent you already have: it asks the model, runs the tool calls the model makes with a local
function, sends the results back, and stops at a final answer. hybridrl trains it as it is:

    python -m hybridrl.trainer.main_ppo ... actor_rollout_ref.rollout.mode=async data.return_raw_chat=True \
        actor_rollout_ref.rollout.agent.custom_rollout_function.path=examples/agents_in_your_code/calculator_agent.py

``rollout(client, row)`` plays one question (``row["raw_prompt"]``: the system and user messages of the dataset row)
and returns its reward: 1.0 when the final answer ``#### <n>`` is ``row["reward_model"]["ground_truth"]``, else 0.0.
Each request replays the conversation faithfully (the previous messages unchanged, the assistant message exactly as
the endpoint returned it, tool calls included, then the tool results), which lets hybridrl continue the prompt from
the tokens the model generated: one training sample per conversation, the model's tokens exactly.

Standalone, against a served checkpoint (``python -m hybridrl.serve model.path=<model>``)::

    python examples/agents_in_your_code/calculator_agent.py --base_url http://127.0.0.1:8000/v1 --questions 8
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import operator
import random
import re

import openai

MAX_MODEL_TURNS = 3
# the task's system prompt (examples/agent_calculator/prepare_data.py), for the standalone questions
SYSTEM_PROMPT = (
    'Tool: <tool_call>{"name": "calculator", "arguments": {"expression": "..."}}</tool_call>. '
    "Answer: #### <number>."
)
CALCULATOR_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "The expression, e.g. '347*829'."}},
            "required": ["expression"],
        },
    },
}
_FINAL_ANSWER = re.compile(r"####\s*(-?\d+)")

# ----------------------------------------------------------------------------- the tool (safe arithmetic)

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent over {MAX_EXPONENT}")
        return _BINARY[type(node.op)](left, right)
    raise ValueError("only numbers, + - * / // % ** and parentheses are allowed")


def calculate(expression: str) -> str:
    """The value of an arithmetic ``expression`` as text (``"287663"``, ``"3.5"``), or ``"Error: <reason>"``.

    Parsed with :mod:`ast` and evaluated node by node: no names, calls or ``eval``.
    """
    if not isinstance(expression, str) or len(expression) > MAX_EXPRESSION_CHARS:
        return "Error: give the expression as a string of at most 200 characters"
    try:
        value = _evaluate(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError) as error:
        return f"Error: {error}"
    if isinstance(value, complex):
        return "Error: the result is not a real number"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}" if isinstance(value, float) else str(value)


def run_tool_call(call) -> str:
    """Result text of one OpenAI tool call (``call.function.name``, JSON ``call.function.arguments``)."""
    if call.function.name != "calculator":
        return f"Error: unknown tool {call.function.name!r}"
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError:
        return "Error: the arguments are not JSON"
    return calculate(arguments.get("expression") if isinstance(arguments, dict) else None)


# ----------------------------------------------------------------------------- one episode


def final_answer(text: str | None) -> str | None:
    """The last ``#### <integer>`` of ``text`` (``None`` without one)."""
    answers = _FINAL_ANSWER.findall(text or "")
    return answers[-1] if answers else None


def score(answer: str | None, ground_truth) -> float:
    """1.0 when ``answer`` is the integer ``ground_truth``, else 0.0."""
    return 1.0 if answer is not None and int(answer) == int(str(ground_truth).strip()) else 0.0


async def rollout(client, row: dict, model: str = "policy", max_tokens: int | None = None) -> float:
    """Play ``row``'s question with ``client`` (an ``openai.AsyncOpenAI``); the reward, 1.0 or 0.0.

    Up to ``MAX_MODEL_TURNS`` model turns: each turn's tool calls are run locally and answered with tool messages;
    a turn without tool calls is the final answer. Running out of turns, of tokens or of context (the server's
    ``context_length_exceeded``: the conversation outgrew ``rollout.prompt_length + response_length``) scores 0;
    any other error propagates (hybridrl then counts the trajectory as failed and skips it). ``max_tokens``
    None leaves each turn's length to the server (in training: what is left of ``rollout.response_length``, to
    which a larger explicit value is clamped).
    """
    messages = [dict(message) for message in row["raw_prompt"]]
    limits = {} if max_tokens is None else {"max_tokens": max_tokens}
    for _ in range(MAX_MODEL_TURNS):
        try:
            response = await client.chat.completions.create(
                model=model, messages=messages, tools=[CALCULATOR_TOOL], **limits
            )
        except openai.BadRequestError as error:
            if error.code == "context_length_exceeded":
                return 0.0
            raise
        choice = response.choices[0]
        message = choice.message
        if not message.tool_calls:
            return score(final_answer(message.content), row["reward_model"]["ground_truth"])
        if choice.finish_reason == "length":
            break
        messages.append(message.model_dump(exclude_none=True))  # exactly as returned, tool calls included
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run_tool_call(call)})
    return 0.0


# ----------------------------------------------------------------------------- standalone


def question_row(a: int, b: int) -> dict:
    """A row like the dataset's (``raw_prompt``, ``reward_model``) for ``a*b``."""
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"What is {a}*{b}?"}]
    return {"raw_prompt": prompt, "reward_model": {"style": "rule", "ground_truth": str(a * b)}}


async def play(base_url: str, api_key: str, model: str | None, questions: int, seed: int,
               max_tokens: int | None = 64) -> float:
    """Play ``questions`` random questions against ``base_url``; prints each reward, returns the mean."""
    rng = random.Random(seed)
    rows = [question_row(rng.randint(317, 999), rng.randint(317, 999)) for _ in range(questions)]
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key) as client:
        if model is None:
            model = (await client.models.list()).data[0].id
        rewards = await asyncio.gather(*(rollout(client, row, model=model, max_tokens=max_tokens) for row in rows))
    for row, reward in zip(rows, rewards):
        print(f"{row['raw_prompt'][-1]['content']:<22} reward {reward:.0f}")
    mean = sum(rewards) / len(rewards)
    print(f"mean reward {mean:.3f} over {len(rewards)} questions")
    return mean


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base_url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api_key", default="none", help="server.api_key of the server, if it has one")
    parser.add_argument("--model", default=None, help="model id (default: the server's first)")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_tokens", type=int, default=64, help="per model turn")
    args = parser.parse_args(argv)
    asyncio.run(play(args.base_url, args.api_key, args.model, args.questions, args.seed, args.max_tokens))


if __name__ == "__main__":
    main()
