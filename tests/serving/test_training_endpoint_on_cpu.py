"""The training endpoint with the real openai client over a real socket (the rollout servers are a scripted fake
inside this unit test): exact multi-turn continuation, the run's sampling settings, budgets, and
``openai_agent`` running user rollout functions (a good one, a raising one, a hanging one)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from config_testlib import compose_config

from hybridrl.agents.openai_agent_loop import OpenAIAgentLoop
from hybridrl.agents.trajectory_samples import samples_from_completions
from hybridrl.experimental.agent_loop.agent_loop import AgentLoopMetrics
from hybridrl.generation import resolve_request_params
from hybridrl.serving.training_endpoint import TrainingEndpoint
from hybridrl.workers.rollout.async_server import TokenOutput

CALC = {"type": "function", "function": {"name": "calculator", "description": "arithmetic",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
CALL_TEXT = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'


class ScriptedServers:
    """``AsyncLLMServerManager.generate`` stand-in: scripted replies (+ EOS), remembers each call's arguments."""

    def __init__(self, tokenizer, replies) -> None:
        self.tokenizer, self.replies, self.calls = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        text = self.replies[(len(self.calls) - 1) % len(self.replies)]
        ids = (self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id])
        ids = ids[: sampling_params["max_tokens"]]
        stop = "stop" if ids[-1] == self.tokenizer.eos_token_id else "length"
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason=stop)


def _config(model_dir, *extra):
    return compose_config("ppo_trainer", [
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=True",
        "actor_rollout_ref.rollout.prompt_length=512", "actor_rollout_ref.rollout.response_length=400", *extra])


async def _tool_conversation(client, edit_answer: bool = False) -> list:
    messages = [{"role": "user", "content": "what is 12 times 7"}]
    first = await client.chat.completions.create(model="ignored-by-test", messages=messages, tools=[CALC],
                                                 temperature=0.1)
    reply = first.choices[0].message
    assistant = {"role": "assistant", "content": reply.content,
                 "tool_calls": [c.model_dump() for c in reply.tool_calls or []]}
    if edit_answer:
        assistant = {"role": "assistant", "content": "I will compute it."}
    messages += [assistant, {"role": "tool", "tool_call_id": "x", "content": "84"}]
    second = await client.chat.completions.create(model="ignored-by-test", messages=messages, tools=[CALC])
    return [first, second]


def _run_conversation(config, tokenizer, replies, sampling, edit_answer=False):
    servers = ScriptedServers(tokenizer, replies)

    async def play():
        endpoint = TrainingEndpoint(config, servers, tokenizer)
        await endpoint.start()
        endpoint.begin("traj-1", sampling)
        client = endpoint.client("traj-1", timeout_s=30)
        try:
            responses = await _tool_conversation(client, edit_answer)
        finally:
            await client.close()
        return endpoint, responses, endpoint.end("traj-1")

    endpoint, responses, records = asyncio.run(play())
    return servers, endpoint, responses, records


@pytest.fixture(scope="module")
def tools_config(tiny_model_dir):
    return _config(tiny_model_dir)


def test_replayed_tool_conversation_continues_from_the_models_tokens(tools_tokenizer, tools_config):
    servers, endpoint, responses, records = _run_conversation(
        tools_config, tools_tokenizer, [CALL_TEXT, "#### 84"], {"temperature": 0.7, "top_p": 0.9, "seed": 5})
    assert responses[0].choices[0].finish_reason == "tool_calls"
    assert json.loads(responses[0].choices[0].message.tool_calls[0].function.arguments) == {"expression": "12*7"}
    first, second = records
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.response_ids)] == first.prompt_ids + first.response_ids
    assert endpoint.renderer.continued == 1
    (sample,) = samples_from_completions(records, 1.0, response_length=400, metrics=AgentLoopMetrics())
    generated = [t for t, m in zip(sample.response_ids, sample.response_mask) if m == 1]
    assert generated == first.response_ids + second.response_ids
    # the run's sampling settings win over the client's temperature=0.1; a seed per completion
    params = [call[2] for call in servers.calls]
    assert [p["temperature"] for p in params] == [0.7, 0.7] and params[0]["top_p"] == 0.9
    assert params[0]["seed"] != params[1]["seed"] and all(p["logprobs"] for p in params)


def test_the_agent_loops_call_layer_reaches_the_server_and_the_clients_temperature_does_not(
        tools_tokenizer, tools_config):
    # what AgentLoopWorker gives each trajectory of a validation call: seed, logprobs and the call's layer
    sampling = {"seed": 5, "logprobs": True, "meta_info": {"validate": True}}
    servers, _, _, _ = _run_conversation(tools_config, tools_tokenizer, [CALL_TEXT, "#### 84"], sampling)
    params = [call[2] for call in servers.calls]
    assert [p["meta_info"] for p in params] == [{"validate": True}] * 2
    assert not any("temperature" in p for p in params)  # the client's temperature=0.1 is dropped
    # the server resolves the settings once: validation's (the YAML's val_kwargs: do_sample False → greedy), and
    # the first completion's seed 5 * 1009 + 0
    rollout = tools_config.actor_rollout_ref.rollout
    resolved = resolve_request_params(params[0], rollout, eos_token_ids=[tools_tokenizer.eos_token_id], pad_token_id=0)
    assert not rollout.val_kwargs.do_sample and rollout.do_sample
    assert (resolved.sampling.temperature, resolved.sampling.do_sample, resolved.seed) == (0.0, False, 5045)


def test_an_edited_history_starts_a_new_chain(tools_tokenizer, tiny_model_dir):
    config = _config(tiny_model_dir, "actor_rollout_ref.rollout.prompt_length=900")  # a new chain's prompt must fit
    _, endpoint, _, records = _run_conversation(config, tools_tokenizer, [CALL_TEXT, "#### 84"], {},
                                                edit_answer=True)
    assert endpoint.renderer.continued == 0
    samples = samples_from_completions(records, 1.0, response_length=400, metrics=AgentLoopMetrics())
    assert len(samples) == 2


def test_the_chain_budget_caps_and_then_refuses_tokens(tokenizer, tiny_model_dir):
    config = _config(tiny_model_dir, "actor_rollout_ref.rollout.response_length=60")
    servers, _, responses, records = _run_conversation(config, tokenizer, ["a b c d e f g h i j " * 6], {})
    first, second = records
    assert servers.calls[0][2]["max_tokens"] == 60
    used = len(second.prompt_ids) - len(first.prompt_ids)
    assert len(first.response_ids) == 60 and used >= 60  # the first turn spent the whole budget
    assert responses[1].choices[0].finish_reason == "length" and second.response_ids == []
    assert len(servers.calls) == 1  # the second request never reached the engine


def test_a_new_chain_longer_than_prompt_length_is_a_400(tools_tokenizer, tiny_model_dir):
    import openai

    config = _config(tiny_model_dir, "actor_rollout_ref.rollout.prompt_length=100")
    with pytest.raises(openai.BadRequestError, match="rollout.prompt_length"):
        _run_conversation(config, tools_tokenizer, [CALL_TEXT, "#### 84"], {})


def test_max_tokens_over_the_budget_is_clamped_not_refused(tokenizer, tiny_model_dir):
    servers = ScriptedServers(tokenizer, ["#### 84"])

    async def play():
        endpoint = TrainingEndpoint(_config(tiny_model_dir), servers, tokenizer)
        await endpoint.start()
        endpoint.begin("t", {})
        client = endpoint.client("t", timeout_s=30)
        try:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=100_000)
        finally:
            await client.close()

    asyncio.run(play())
    assert servers.calls[0][2]["max_tokens"] == 400  # rollout.response_length


def _loop(config, tokenizer, servers):
    return OpenAIAgentLoop(trainer_config=config, server_manager=servers, tokenizer=tokenizer)


AGENT = '''
import asyncio
import time

async def rollout(client, row):
    kind = row["extra_info"]["kind"]
    if kind == "raise":
        raise RuntimeError("agent bug")
    if kind == "hang":
        await asyncio.sleep(3600)
    if kind == "block":  # a synchronous sleep inside async def: blocks the loop it runs on
        time.sleep(3)
    if kind == "bad":
        return "not a number"
    reply = await client.chat.completions.create(model="any", messages=list(row["raw_prompt"]))
    return 1.0 if "84" in (reply.choices[0].message.content or "") else 0.0
'''


@pytest.mark.parametrize("kind,counter", [("ok", None), ("raise", "trajectory_errors"),
                                          ("hang", "trajectory_timeouts"), ("bad", "trajectory_errors")])
def test_openai_agent_scores_its_trajectory_and_survives_bad_agents(tokenizer, tiny_model_dir, tmp_path, kind, counter):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = _config(tiny_model_dir, f"actor_rollout_ref.rollout.agent.custom_rollout_function.path={agent}",
                     "actor_rollout_ref.rollout.agent.custom_rollout_function.timeout_s=1")
    servers = ScriptedServers(tokenizer, ["#### 84"])
    row = {"raw_prompt": [{"role": "user", "content": "what is 12 times 7"}], "extra_info": {"kind": kind}}
    (sample,) = asyncio.run(_loop(config, tokenizer, servers).run({"temperature": 1.0, "seed": 3}, **row))
    if counter is None:
        assert sample.extra_fields["reward_scores"] == {len(sample.response_ids) - 1: 1.0}
        assert sum(sample.response_mask) == len(sample.response_ids) > 0
        assert sample.response_logprobs == [-0.25] * len(sample.response_ids)
    else:
        assert sample.metrics.counters[counter] == 1 and sample.metrics.counters["failed_trajectories"] == 1
        assert "trajectory_blocked" not in sample.metrics.counters  # awaiting (hang) is not blocking
        assert sample.response_mask == [0] and sample.extra_fields["reward_scores"] == {0: 0.0}


def test_a_blocking_rollout_function_stalls_only_its_own_trajectory(tokenizer, tiny_model_dir, tmp_path, caplog):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = _config(tiny_model_dir, f"actor_rollout_ref.rollout.agent.custom_rollout_function.path={agent}",
                     "actor_rollout_ref.rollout.agent.custom_rollout_function.timeout_s=1")
    servers = ScriptedServers(tokenizer, ["#### 84"])

    def row(kind):
        return {"raw_prompt": [{"role": "user", "content": "what is 12 times 7"}], "extra_info": {"kind": kind}}

    async def batch():
        loop = _loop(config, tokenizer, servers)
        await loop.run({"temperature": 1.0}, **row("ok"))  # warm-up: the endpoint starts, the agent is imported
        start = time.monotonic()
        kinds = ["block", "ok", "raise", "ok"]  # as AgentLoopWorker runs a batch: concurrent tasks on one loop
        outputs = await asyncio.gather(*(loop.run({"temperature": 1.0, "seed": i}, **row(kind))
                                         for i, kind in enumerate(kinds)))
        return [sample for (sample,) in outputs], time.monotonic() - start

    samples, elapsed = asyncio.run(batch())
    counters = [sample.metrics.counters for sample in samples]
    assert counters[0]["trajectory_timeouts"] == 1 and counters[0]["trajectory_blocked"] == 1
    assert counters[2] == {"trajectory_errors": 1, "completions": 0, "failed_trajectories": 1}  # not a timeout
    for ok in (1, 3):  # answered at once, scored, not timed out by the blocked one
        assert counters[ok] == {"completions": 1, "samples": 1}
        assert list(samples[ok].extra_fields["reward_scores"].values()) == [1.0]
    assert elapsed < 2.5  # the batch waits for the blocked trajectory's timeout_s=1, not for its 3 s sleep
    blocked = [r.getMessage() for r in caplog.records if "blocked its event loop" in r.getMessage()]
    assert len(blocked) == 1 and f"rollout ({agent}:5)" in blocked[0]
