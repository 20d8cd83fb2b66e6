"""Agent loops that need both the agent-loop machinery and the OpenAI-compatible server.

    hybridrl.agents ──► hybridrl.experimental.agent_loop   (AgentLoopBase, register, the rollout batch layout)
          └──────────► hybridrl.serving                    (the training endpoint an agent's OpenAI client calls)
    both build on hybridrl.generation and never import each other

- ``openai_agent_loop.py``: ``openai_agent``, an agent written against the OpenAI API, trained as-is
  (``rollout.agent.custom_rollout_function``). The agent-loop registry names it by path, so a row's
  ``agent_name: openai_agent`` resolves in any process.
- ``trajectory_samples.py``: the completions one trajectory made through the endpoint → training samples.
"""
