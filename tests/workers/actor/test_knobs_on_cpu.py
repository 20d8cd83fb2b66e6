"""verl's memory/speed knobs leave the numbers unchanged: entropy chunking, entropy checkpointing,
activation offload, torch.compile (with its eager fallback)."""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.actor.knobs import activation_offload_context, maybe_compile


def _update(model, config, data):
    """One update on a copy of ``model``; returns (metrics, grads by name before the step, new params)."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    actor = DataParallelPPOActor(config, model, optimizer)
    grads: dict[str, torch.Tensor] = {}

    def capture_then_step(closure=None):
        grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        return torch.optim.SGD.step(optimizer, closure)

    optimizer.step = capture_then_step
    metrics = actor.update_policy(data)
    return metrics, grads, dict(model.named_parameters())


def _log_probs(model, config, data):
    data.meta_info.update(micro_batch_size=2, use_dynamic_bsz=False)
    return DataParallelPPOActor(config, model).compute_log_prob(data, calculate_entropy=True)


@pytest.mark.parametrize("knob", ["entropy_from_logits_with_chunking", "entropy_checkpointing"])
@pytest.mark.parametrize("use_remove_padding", [False, True])
def test_entropy_knobs_equal_plain_path(causal_lm, make_batch, make_actor_config, knob, use_remove_padding):
    plain = make_actor_config(entropy_coeff=0.01, use_remove_padding=use_remove_padding, ppo_micro_batch_size_per_gpu=2)
    tuned = make_actor_config(
        entropy_coeff=0.01, use_remove_padding=use_remove_padding, ppo_micro_batch_size_per_gpu=2, **{knob: True}
    )
    # forward: log-probs and entropies
    lp_plain, ent_plain = _log_probs(causal_lm, plain, make_batch(batch_size=4))
    lp_tuned, ent_tuned = _log_probs(causal_lm, tuned, make_batch(batch_size=4))
    torch.testing.assert_close(lp_tuned, lp_plain, rtol=0, atol=0)
    torch.testing.assert_close(ent_tuned, ent_plain, rtol=1e-6, atol=1e-6)
    # update: the loss (with its entropy term) and every gradient
    m_plain, g_plain, _ = _update(causal_lm, plain, make_batch(batch_size=4))
    m_tuned, g_tuned, _ = _update(causal_lm, tuned, make_batch(batch_size=4))
    assert m_plain["actor/entropy"][0] > 0
    for key in ("actor/entropy", "actor/pg_loss", "actor/grad_norm"):
        torch.testing.assert_close(torch.tensor(m_tuned[key]), torch.tensor(m_plain[key]), rtol=1e-5, atol=1e-6)
    assert set(g_plain) == set(g_tuned) and g_plain
    for name, grad in g_plain.items():
        torch.testing.assert_close(g_tuned[name], grad, rtol=1e-4, atol=1e-6)


def test_activation_offload_is_a_warned_no_op_on_cpu(causal_lm, make_batch, make_actor_config):
    with pytest.warns(UserWarning, match="enable_activation_offload"):
        with activation_offload_context(True, "cpu-knob-test"):  # a device name that is not cuda
            pass
    plain = make_actor_config()
    offload = make_actor_config(enable_activation_offload=True)
    m_plain, g_plain, _ = _update(causal_lm, plain, make_batch(batch_size=4))
    m_off, g_off, _ = _update(causal_lm, offload, make_batch(batch_size=4))
    assert m_off["actor/pg_loss"] == m_plain["actor/pg_loss"]
    for name, grad in g_plain.items():
        torch.testing.assert_close(g_off[name], grad, rtol=0, atol=0)


def test_save_on_cpu_context_keeps_gradients_equal():
    # what enable_activation_offload does on CUDA, exercised on CPU: saved tensors round-trip through host memory
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    (torch.tanh(x @ w) ** 2).sum().backward()
    expected = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    with torch.autograd.graph.save_on_cpu(pin_memory=False):
        loss = (torch.tanh(x @ w) ** 2).sum()
    loss.backward()
    torch.testing.assert_close((x.grad, w.grad), expected, rtol=0, atol=0)


def test_compile_is_eager_on_cpu_by_default(monkeypatch):
    monkeypatch.delenv("HYBRIDRL_COMPILE_ON_CPU", raising=False)
    assert maybe_compile(entropy_from_logits, True, "cpu") is entropy_from_logits
    assert maybe_compile(entropy_from_logits, False, "cuda") is entropy_from_logits


def test_compile_falls_back_to_eager_when_compilation_fails(monkeypatch):
    def broken_compile(fn, **_):
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler")

        return fail

    monkeypatch.setattr(torch, "compile", broken_compile)
    helper = maybe_compile(entropy_from_logits, True, "cuda")
    logits = torch.randn(2, 3, 7)
    with pytest.warns(UserWarning, match="running it eagerly"):
        out = helper(logits)
    torch.testing.assert_close(out, entropy_from_logits(logits), rtol=0, atol=0)
    torch.testing.assert_close(helper(logits), entropy_from_logits(logits), rtol=0, atol=0)  # no second warning path


@pytest.mark.slow
def test_compiled_helpers_equal_eager_on_cpu(monkeypatch):
    """Inductor on CPU (needs a C++ compiler; ~tens of seconds): compiled ≡ eager within fp32 rounding."""
    monkeypatch.setenv("HYBRIDRL_COMPILE_ON_CPU", "1")
    torch._dynamo.reset()
    logits = torch.randn(2, 6, 50, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(1))
    with _no_fallback():
        ent = maybe_compile(entropy_from_logits, True, "cpu")(logits)
        lp = maybe_compile(logprobs_from_logits, True, "cpu")(logits, labels)
    torch.testing.assert_close(ent, entropy_from_logits(logits), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lp, logprobs_from_logits(logits, labels), rtol=1e-5, atol=1e-5)


class _no_fallback:
    """Fail if maybe_compile fell back to eager (the compiled path must really run)."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self._records = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        fallbacks = [str(r.message) for r in self._records if "running it eagerly" in str(r.message)]
        assert not fallbacks, fallbacks
        return False
