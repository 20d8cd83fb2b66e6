"""hybridrl.models.families: one table says which families each fast path supports; the rest runs plain HF code.

- the registry's answers for the known families, by hand;
- each listed family, as a tiny random model, gets the plain path's numbers through the paths listed for it:
  packed varlen log-probs = padded sdpa log-probs, the shared-prompt forward = the padded forward, and the fast
  decode loop's greedy tokens = ``generate``'s;
- a family the registry does not list (GPT-NeoX) takes the plain path of every fast path, logs one notice per
  path naming its model_type, once per process, and computes the plain transformers numbers.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from hybridrl.generation.records import SamplingParams
from hybridrl.models import families
from hybridrl.models.families import FAMILIES, FastPath, family_of, model_type_of, runs_fast_path, supports
from hybridrl.models.transformers.varlen_attention import VARLEN_ATTN
from hybridrl.utils.torch_functional import compute_position_id_with_mask, logprobs_from_logits
from hybridrl.workers.actor.forward import forward_response
from hybridrl.workers.engine.model_loader import load_hf_model
from hybridrl.workers.rollout.decoding import DecodeOptions, decode_batch

PROMPT_LEN, RESPONSE_LEN, NEW_TOKENS = 7, 5, 6
_TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    max_position_embeddings=256,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
# model_type -> (transformers config class, what a tiny config of it needs besides _TINY)
TINY_CONFIGS = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),
    "qwen3_moe": ("Qwen3MoeConfig", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    "mistral": ("MistralConfig", {}),
    "phi3": ("Phi3Config", {}),
    "olmo2": ("Olmo2Config", {}),
    "gemma3_text": ("Gemma3TextConfig", dict(sliding_window=4)),
    "gemma2": ("Gemma2Config", dict(sliding_window=4)),
    "gpt_oss": ("GptOssConfig", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=4)),
    "gpt_neox": ("GPTNeoXConfig", {}),  # not in the registry
}
_ATTENTION_FAMILIES = [t for t in TINY_CONFIGS if supports(SimpleNamespace(model_type=t), FastPath.VARLEN_ATTENTION)]
_EAGER_FAMILIES = [t for t in TINY_CONFIGS if t not in _ATTENTION_FAMILIES and family_of(SimpleNamespace(model_type=t))]


@pytest.fixture(autouse=True)
def fresh_notices(monkeypatch):
    """Each test sees the notices as a fresh process would."""
    monkeypatch.setattr(families, "_NOTIFIED", set())


def _config(model_type: str):
    import transformers

    class_name, extra = TINY_CONFIGS[model_type]
    kwargs = {**_TINY, **extra}
    if model_type == "gpt_neox":  # no head_dim / num_key_value_heads arguments
        kwargs = {k: v for k, v in kwargs.items() if k not in ("head_dim", "num_key_value_heads")}
    return getattr(transformers, class_name)(**kwargs)


def _tiny_model_dir(model_type: str, root) -> str:
    """A tiny random model of ``model_type`` saved under ``root``, its matrices drawn at std 0.3 (at the usual
    0.02 greedy decoding repeats one token, and equality of decodes would say little)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(model_type), dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    path = root / model_type
    model.save_pretrained(path)
    return str(path)


def _batch() -> dict[str, torch.Tensor]:
    """4 rows, left-padded prompts [4, 7] + right-padded responses [4, 5]; rows 2 and 3 repeat the prompts of rows
    0 and 1 (GRPO's samples of one prompt), so the shared-prompt forward has something to share."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, _TINY["vocab_size"], (4, PROMPT_LEN + RESPONSE_LEN), generator=generator)
    mask = torch.zeros_like(ids)
    for row, (prompt, response) in enumerate([(7, 5), (3, 1), (7, 4), (3, 2)]):
        mask[row, PROMPT_LEN - prompt : PROMPT_LEN + response] = 1
    ids = ids * mask
    ids[2:, :PROMPT_LEN] = ids[:2, :PROMPT_LEN]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": ids[:, PROMPT_LEN:],
        "response_mask": mask[:, PROMPT_LEN:],
    }


def _plain_log_probs(model, batch) -> torch.Tensor:
    """transformers' own padded forward: log-probs of the response tokens ``[4, 5]``."""
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits
    return logprobs_from_logits(logits[:, PROMPT_LEN - 1 : -1], batch["responses"])


def _log_probs(model, batch, use_remove_padding: bool, share_prompt_prefix: bool) -> torch.Tensor:
    with torch.no_grad():
        (log_probs,) = forward_response(
            model,
            batch,
            use_remove_padding,
            lambda lg, nt: [logprobs_from_logits(lg, nt)],
            share_prompt_prefix=share_prompt_prefix,
        )
    return log_probs


def _greedy(model, batch):
    params = SamplingParams(
        temperature=0.0,
        top_k=-1,
        top_p=1.0,
        do_sample=False,
        max_new_tokens=NEW_TOKENS,
        n=1,
        ignore_eos=True,
        eos_token_ids=(1,),
        pad_token_id=0,
        calculate_log_probs=True,
    )
    prompt, prompt_mask = batch["input_ids"][:, :PROMPT_LEN], batch["attention_mask"][:, :PROMPT_LEN]
    result = decode_batch(model.eval(), prompt, prompt_mask, params, None, DecodeOptions())
    with torch.no_grad():
        expected = model.generate(
            prompt, attention_mask=prompt_mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )
    return result.token_ids, expected[:, PROMPT_LEN:].tolist()


def _assert_close_on_responses(got: torch.Tensor, expected: torch.Tensor, batch) -> None:
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=2e-5)


def _notices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == families.__name__]


# ----------------------------------------------------------------------------- the table


def test_answers_for_known_families():
    decoder_paths = {
        FastPath.PREALLOCATED_KV_CACHE,
        FastPath.VARLEN_ATTENTION,
        FastPath.SHARED_PREFIX,
        FastPath.PACKED_HEAD,
        FastPath.FP32_ATTENTION,
        FastPath.ULYSSES,
    }
    expected = {
        "llama": decoder_paths | {FastPath.MEGATRON},
        "qwen2": decoder_paths | {FastPath.MEGATRON},
        "qwen3": decoder_paths,
        "qwen3_moe": decoder_paths | {FastPath.ROUTER_REPLAY},
        "mistral": decoder_paths,
        "phi3": decoder_paths,
        "olmo2": decoder_paths,
        "gemma3_text": decoder_paths - {FastPath.ULYSSES},  # sliding windows: the Ulysses kernel has none
        "gemma2": {FastPath.SHARED_PREFIX, FastPath.PACKED_HEAD},  # eager attention only
        "gpt_oss": {FastPath.SHARED_PREFIX, FastPath.PACKED_HEAD, FastPath.ROUTER_REPLAY},
        "gpt_neox": set(),  # not listed
        "gemma3": set(),  # the multimodal config: not listed (its text config is)
    }
    for model_type, paths in expected.items():
        config = SimpleNamespace(model_type=model_type)
        assert {path for path in FastPath if supports(config, path)} == paths, model_type
    assert family_of(SimpleNamespace(model_type="qwen2")).qkv_bias  # Qwen2's q/k/v carry a bias
    assert not family_of(SimpleNamespace(model_type="llama")).qkv_bias
    assert families.model_types_for(FastPath.MEGATRON) == ("llama", "qwen2")


def test_every_listed_model_type_has_a_tiny_config_here():
    """The equality tests below cover every model type of the table."""
    listed = {model_type for family in FAMILIES for model_type in family.model_types}
    assert listed <= set(TINY_CONFIGS)
    for model_type in TINY_CONFIGS:
        assert _config(model_type).model_type == model_type


def test_model_type_of_reads_configs_models_and_wrappers():
    config = _config("qwen2")
    model = SimpleNamespace(config=config)
    assert model_type_of(config) == model_type_of(model) == "qwen2"
    assert model_type_of(SimpleNamespace(module=model)) == "qwen2"  # FSDP1's wrapper holds the model in .module
    assert model_type_of(torch.nn.Linear(2, 2)) is None and family_of(None) is None


def test_runs_fast_path_notices_once_per_model_type_and_path(caplog):
    unknown = SimpleNamespace(model_type="hybridrl_test_arch")
    with caplog.at_level(logging.WARNING, logger=families.__name__):
        assert not runs_fast_path(unknown, FastPath.PACKED_HEAD)
        assert not runs_fast_path(unknown, FastPath.PACKED_HEAD)
        assert not runs_fast_path(unknown, FastPath.SHARED_PREFIX)
        assert not runs_fast_path(SimpleNamespace(model_type="gpt_oss"), FastPath.VARLEN_ATTENTION)
        assert runs_fast_path(SimpleNamespace(model_type="llama"), FastPath.VARLEN_ATTENTION)
    notices = _notices(caplog)
    assert len(notices) == 3 and all("\n" not in n for n in notices)
    assert "'hybridrl_test_arch'" in notices[0] and "packed_head" in notices[0]
    assert "'hybridrl_test_arch'" in notices[1] and "shared_prefix" in notices[1]
    assert "'gpt_oss'" in notices[2] and "family gpt_oss" in notices[2] and "varlen_attention" in notices[2]


# ----------------------------------------------------------------------------- listed families: the same numbers


@pytest.mark.parametrize("model_type", _ATTENTION_FAMILIES)
def test_listed_family_gets_the_plain_numbers_through_its_fast_paths(model_type, tmp_path, caplog):
    model_dir = _tiny_model_dir(model_type, tmp_path)
    sdpa, _ = load_hf_model(model_dir, attn_implementation="sdpa")
    with caplog.at_level(logging.WARNING, logger=families.__name__):
        varlen, _ = load_hf_model(model_dir)  # no implementation asked for: the registry lets sdpa become varlen
        batch = _batch()
        expected = _plain_log_probs(sdpa, batch)
        _assert_close_on_responses(_log_probs(varlen, batch, True, False), expected, batch)
        _assert_close_on_responses(_log_probs(sdpa, batch, False, True), expected, batch)
        got, generated = _greedy(varlen, batch)
    assert varlen.config._attn_implementation == VARLEN_ATTN
    assert got == generated
    assert _notices(caplog) == []  # every path it took is listed: no notice


@pytest.mark.parametrize("model_type", _EAGER_FAMILIES)
def test_eager_family_gets_the_plain_numbers_through_its_fast_paths(model_type, tmp_path, caplog):
    model_dir = _tiny_model_dir(model_type, tmp_path)
    batch = _batch()
    with caplog.at_level(logging.WARNING, logger=families.__name__):
        model, _ = load_hf_model(model_dir)
        _assert_close_on_responses(_log_probs(model, batch, False, True), _plain_log_probs(model, batch), batch)
        got, generated = _greedy(model, batch)
    assert model.config._attn_implementation == "eager"
    assert got == generated
    assert {path.value for path in FastPath if any(path.value in n for n in _notices(caplog))} == {
        "varlen_attention",
        "preallocated_kv_cache",
        "fp32_attention",
    }  # the unlisted paths it met


# ----------------------------------------------------------------------------- an unknown family: plain paths


def test_unknown_family_takes_the_plain_paths_with_one_notice_each(tmp_path, caplog):
    model_dir = _tiny_model_dir("gpt_neox", tmp_path)
    batch = _batch()
    with caplog.at_level(logging.WARNING, logger=families.__name__):
        model, _ = load_hf_model(model_dir)
        assert model.config._attn_implementation == "sdpa"  # not switched to varlen
        expected = _plain_log_probs(model, batch)
        for _ in range(2):  # the second round logs nothing new
            _assert_close_on_responses(_log_probs(model, batch, True, False), expected, batch)
            _assert_close_on_responses(_log_probs(model, batch, False, True), expected, batch)
            got, generated = _greedy(model, batch)
            assert got == generated
    notices = _notices(caplog)
    paths = [path.value for notice in notices for path in FastPath if f" {path.value} is off" in notice]
    assert sorted(paths) == sorted(
        ["varlen_attention", "shared_prefix", "preallocated_kv_cache", "packed_head", "fp32_attention"]
    )
    assert all("model_type='gpt_neox'" in notice for notice in notices)


def test_ulysses_on_an_unlisted_family_is_a_clear_error(tmp_path):
    """Ulysses has no plain path to fall back to (the SP ranks hold slices of the sequence): the model builder
    refuses a family the registry does not list for it, naming the model type and the fix."""
    from omegaconf import OmegaConf

    from hybridrl.workers.engine.model_builder import ModelSpec, build_fsdp_module

    model_config = OmegaConf.create(
        {
            "path": _tiny_model_dir("gpt_neox", tmp_path),
            "external_lib": None,
            "override_config": {},
            "trust_remote_code": False,
            "enable_gradient_checkpointing": False,
        }
    )
    spec = ModelSpec(model_config, OmegaConf.create({}), "fsdp2", "causal_lm", trainable=False, sp_group=object())
    with pytest.raises(ValueError, match=r"model_type='gpt_neox'.*ulysses_sequence_parallel_size=1"):
        build_fsdp_module(spec, "cpu")
