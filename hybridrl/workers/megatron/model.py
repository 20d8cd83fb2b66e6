"""A megatron-core ``GPTModel`` built from a Hugging Face Llama/Qwen2-family config, and its HF-style wrapper.

The model uses megatron-core's local layer spec on CPU (torch norms and attention; the TransformerEngine spec
cannot run there) and the TransformerEngine spec on GPU. :class:`MegatronCausalLM` lets the PPO actor call it like
an HF causal LM: ``module(input_ids, attention_mask, position_ids) -> .logits [B, S, V]``.

Positions: megatron-core's rotary embedding uses positions ``0..S-1`` of the row, not ``position_ids``. RoPE
scores depend only on ``i − j``, so with the pad keys masked out a left-padded row gives the same logits as
HF's shifted positions, and a packed row (positions restarting at 0) gives them with a block-diagonal mask.

Context parallelism (CP > 1, GPU only, never run yet): the view feeds the model this CP rank's THD slice and
gathers the outputs over CP (:mod:`hybridrl.workers.megatron.context_parallel`).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hybridrl.models.families import FastPath, family_of, model_types_for, supports
from hybridrl.workers.megatron import context_parallel

__all__ = ["MegatronCausalLM", "MegatronValueModel", "ValueHead", "attention_mask_for", "build_gpt_model",
           "load_hf_value_head", "padded_vocab_size", "rope_settings", "transformer_config", "trunk_of"]

SUPPORTED_MODEL_TYPES = model_types_for(FastPath.MEGATRON)  # llama, qwen2


def padded_vocab_size(vocab_size: int, tp_size: int) -> int:
    """Vocabulary padded to a multiple of the TP size (each rank holds ``padded / tp`` rows)."""
    return -(-vocab_size // tp_size) * tp_size


def rope_settings(hf_config: Any) -> tuple[float, dict | None]:
    """``(rope_theta, scaling)`` of an HF config; ``scaling`` None for plain RoPE.

    transformers 4.x keeps ``rope_theta`` and ``rope_scaling`` (None for plain RoPE) as attributes; 5.x keeps both in
    ``rope_parameters`` (``{"rope_type": "default", "rope_theta": ...}``) and ``rope_scaling`` is an alias of it, so a
    plain model has a non-empty ``rope_scaling`` there: only a ``rope_type`` other than ``default`` is a scaling.
    """
    params = getattr(hf_config, "rope_parameters", None)
    if not isinstance(params, dict):
        params = dict(getattr(hf_config, "rope_scaling", None) or {})
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    rope_type = params.get("rope_type", params.get("type"))
    scaling = {k: v for k, v in params.items() if k != "rope_theta"} if rope_type not in (None, "default") else None
    return float(theta if theta is not None else 10000.0), scaling


def _check_supported(hf_config: Any) -> None:
    if not supports(hf_config, FastPath.MEGATRON):
        raise ValueError(
            f"strategy=megatron builds Llama/Qwen2-family models; model_type={hf_config.model_type!r} is not one "
            f"of {SUPPORTED_MODEL_TYPES}."
        )
    _, scaling = rope_settings(hf_config)
    if scaling:
        raise ValueError(
            f"strategy=megatron: rope scaling {scaling!r} is not supported by the built-in model yet "
            "(use a model without rope_scaling / a rope_parameters.rope_type other than 'default')."
        )


def transformer_config(hf_config: Any, megatron_config: Any, dtype: torch.dtype, device_name: str) -> Any:
    """megatron-core ``TransformerConfig`` of ``hf_config`` with the parallel sizes of ``megatron_config``.

    ``megatron_config`` is an ``actor_rollout_ref.actor.megatron``-shaped section; its
    ``override_transformer_config`` entries are applied last (verl). On CPU sequence parallelism is off (the
    torch norm rejects it) and fused kernels are off.
    """
    from megatron.core.transformer import TransformerConfig

    _check_supported(hf_config)
    tp_size = int(megatron_config.tensor_model_parallel_size)
    on_gpu = device_name == "cuda"
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    fields = dict(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        ffn_hidden_size=hf_config.intermediate_size,
        num_attention_heads=hf_config.num_attention_heads,
        num_query_groups=hf_config.num_key_value_heads,
        kv_channels=head_dim,
        layernorm_epsilon=hf_config.rms_norm_eps,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=family_of(hf_config).qkv_bias or bool(getattr(hf_config, "attention_bias", False)),
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=tp_size,
        pipeline_model_parallel_size=int(megatron_config.pipeline_model_parallel_size),
        context_parallel_size=int(megatron_config.context_parallel_size),
        sequence_parallel=bool(megatron_config.sequence_parallel) and tp_size > 1 and on_gpu,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype is torch.bfloat16,
        variable_seq_lengths=True,
        moe_token_dispatcher_type="alltoall",  # the dispatcher that supports variable sequence lengths
        use_cpu_initialization=not on_gpu,
        masked_softmax_fusion=on_gpu,
        bias_activation_fusion=on_gpu,
        bias_dropout_fusion=on_gpu,
        persist_layer_norm=on_gpu,
    )
    fields.update(dict(megatron_config.get("override_transformer_config") or {}))
    fields.update(_attention_backend(fields.pop("attention_backend", None), on_gpu))
    return TransformerConfig(**{key: value for key, value in fields.items() if value is not None or key in _NULLABLE})


def _attention_backend(name: Any, on_gpu: bool) -> dict[str, Any]:
    """verl 0.9's ``override_transformer_config.attention_backend`` (a name: flash | fused | unfused | local | auto)
    as megatron-core's enum. It picks among TransformerEngine's kernels, so on CPU (the local spec) it is left out."""
    if name is None or not on_gpu:
        return {}
    from megatron.core.transformer.enums import AttnBackend

    return {"attention_backend": AttnBackend[name] if isinstance(name, str) else name}


# override_transformer_config entries that may legitimately be None (verl's recompute_* defaults)
_NULLABLE = frozenset({"recompute_granularity", "recompute_method", "recompute_num_layers"})


def build_gpt_model(hf_config: Any, config: Any, device_name: str, *, pre_process: bool = True,
                    post_process: bool = True, value_head: bool = False) -> nn.Module:
    """An (untrained) ``GPTModel`` for this rank: local layer spec on CPU, TransformerEngine spec on GPU. With
    PP > 1 it is this pipeline stage's part: its layers, the embedding on the first stage, the final norm and
    output layer on the last (``pre_process`` / ``post_process`` from megatron-core's parallel state).

    ``value_head``: a value model (critic, reward model): output layer untied from the embeddings and replaced by
    a :class:`ValueHead` (as verl's Megatron critic replaces it by a 1-output linear layer).
    """
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=device_name == "cuda")
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:  # this stage's part (embedding / head)
        pre_process = parallel_state.is_pipeline_first_stage()
        post_process = parallel_state.is_pipeline_last_stage()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=padded_vocab_size(hf_config.vocab_size, tp_size),
        max_sequence_length=hf_config.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        parallel_output=True,
        share_embeddings_and_output_weights=bool(getattr(hf_config, "tie_word_embeddings", False)) and not value_head,
        position_embedding_type="rope",
        rotary_base=int(rope_settings(hf_config)[0]),
    )
    if value_head and post_process:
        model.output_layer = ValueHead(config)
    return model.to(torch.device("cuda", torch.cuda.current_device()) if device_name == "cuda" else "cpu")


def attention_mask_for(attention_mask: torch.Tensor | None, position_ids: torch.Tensor) -> torch.Tensor:
    """megatron-core's boolean mask ``[B, 1, S, S]`` (True = masked) for causal attention.

    Args:
        attention_mask: ``[B, S]`` 1 on valid tokens (padded layout), or None for a packed row whose
            ``position_ids [1, nnz]`` restart at 0 at each sequence (attention stays inside a sequence).
    """
    seq_len = position_ids.shape[-1]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=position_ids.device).tril()
    if attention_mask is None:
        segment = torch.cumsum((position_ids == 0).long(), dim=-1)  # [B, S]
        allowed = causal & (segment[:, :, None] == segment[:, None, :])
    else:
        allowed = causal & attention_mask.bool()[:, None, :]
    return ~allowed[:, None, :, :]


class MegatronCausalLM(nn.Module):
    """An HF-style causal-LM view of a (DDP-wrapped) ``GPTModel``: full-vocabulary logits, gathered over TP.

    Args:
        module: the ``GPTModel`` or megatron-core ``DistributedDataParallel`` around it.
        vocab_size: the HF vocabulary ``V`` (logits past it, the TP padding, are dropped).
    """

    def __init__(self, module: nn.Module, vocab_size: int, post_process: bool = True) -> None:
        super().__init__()
        self.module = module
        self.vocab_size = vocab_size
        self.post_process = post_process
        self.stage_output: torch.Tensor | None = None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, **_: Any) -> SimpleNamespace:
        """Returns ``.logits [B, S, V]`` (fp32 on CPU), differentiable; the TP gather splits the gradient back.

        On a pipeline stage other than the last (``post_process=False``) the model's output is the hidden state
        ``[S, B, H]`` for the next stage: kept in :attr:`stage_output`, and ``.logits`` is an empty ``[B, S, 0]``.
        A stage other than the first reads its input from megatron-core's ``set_input_tensor`` (the schedule).
        """
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        if context_parallel.context_parallel_size() > 1:
            return self._forward_context_parallel(input_ids, attention_mask, position_ids)
        mask = attention_mask_for(attention_mask, position_ids)
        output = self.module(input_ids=input_ids, position_ids=position_ids, attention_mask=mask)
        if not self.post_process:
            self.stage_output = output
            return SimpleNamespace(logits=output.new_empty(*input_ids.shape, 0))
        return SimpleNamespace(logits=self._full_output(output))

    def _forward_context_parallel(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                                  position_ids: torch.Tensor) -> SimpleNamespace:
        """CP > 1 (GPU, TransformerEngine spec; never run yet): this CP rank's THD slice through the model, the
        outputs gathered over CP into the caller's layout (:mod:`hybridrl.workers.megatron.context_parallel`)."""
        inputs = context_parallel.context_parallel_inputs(input_ids, attention_mask, position_ids)
        output = self.module(input_ids=inputs.input_ids, position_ids=inputs.position_ids, attention_mask=None,
                             packed_seq_params=inputs.packed_seq_params)
        if not self.post_process:  # the hidden state of this rank's slice [T / CP, 1, H], for the next stage
            self.stage_output = output
            return SimpleNamespace(logits=output.new_empty(*input_ids.shape, 0))
        return SimpleNamespace(logits=context_parallel.gather_outputs(self._full_output(output), inputs))

    def _full_output(self, local_logits: torch.Tensor) -> torch.Tensor:
        """``[B, S, V_pad / tp]`` → ``[B, S, V]``: gathered over TP, the vocabulary padding dropped."""
        from megatron.core import tensor_parallel

        logits = tensor_parallel.gather_from_tensor_model_parallel_region(local_logits)  # [B, S, V_pad]
        return logits[..., : self.vocab_size]


class MegatronValueModel(MegatronCausalLM):
    """The HF token-classification view (``num_labels=1``) of a value ``GPTModel``
    (``build_gpt_model(value_head=True)``): ``module(input_ids, attention_mask, position_ids).logits`` is
    ``[B, S, 1]``, a value per position. The :class:`ValueHead` is replicated over TP, so every TP rank already
    holds the full output."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__(module, vocab_size=1)

    def _full_output(self, local_logits: torch.Tensor) -> torch.Tensor:
        return local_logits


class ValueHead(nn.Linear):
    """The value model's output layer: HF ``*ForTokenClassification.score`` (``hidden → 1``, with bias), replicated
    on every TP rank (verl's Megatron critic uses such a layer, without the bias; the FSDP critic's HF head has one).

    Called as ``GPTModel`` calls its output layer: ``(hidden [S, B, H], weight=None, runtime_gather_output=None)
    -> (values [S, B, 1], None)``. With sequence parallelism (GPU) the sequence shards are gathered first; every TP
    rank then computes the same values and the same loss, so the gather's backward keeps the rank's own slice
    (``tensor_parallel_output_grad=False``) instead of summing identical gradients over TP.
    """

    def __init__(self, config: Any) -> None:
        super().__init__(config.hidden_size, 1, bias=True, dtype=config.params_dtype)
        self.sequence_parallel = bool(config.sequence_parallel)

    def forward(self, hidden_states: torch.Tensor, weight: torch.Tensor | None = None,  # type: ignore[override]
                runtime_gather_output: bool | None = None) -> tuple[torch.Tensor, None]:
        if self.sequence_parallel:
            from megatron.core import tensor_parallel

            hidden_states = tensor_parallel.gather_from_sequence_parallel_region(
                hidden_states, tensor_parallel_output_grad=False
            )
        return super().forward(hidden_states), None

    @torch.no_grad()
    def load_hf(self, score: dict[str, torch.Tensor]) -> None:
        """Copy an HF ``score`` head: ``{"weight": [1, H], "bias": [1]}``."""
        self.weight.copy_(score["weight"].to(self.weight.dtype))
        self.bias.copy_(score["bias"].to(self.bias.dtype))


def load_hf_value_head(model_config: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """The value head the FSDP critic / reward model gets from ``model_config.path``, and the HF config:
    ``({"weight": [1, H], "bias": [1]} fp32 on CPU, hf_config)``.

    The folder is loaded as the FSDP workers load it (``AutoModelForTokenClassification``, ``num_labels=1``, under
    seed 0, ``model_config.override_config`` applied): its own ``score`` tensors when it has them (a reward model,
    a saved critic; a sequence-classification head without bias gets HF's zero bias), else HF's fresh initialisation,
    so a Megatron critic starts from the very head an FSDP critic would. Costs one HF load of the model per rank.
    """
    from omegaconf import OmegaConf

    from hybridrl.workers.engine.model_loader import load_hf_model

    # plain containers: the HF config keeps them (critic.model.override_config.moe_config) and saves them as JSON
    override = OmegaConf.to_container(OmegaConf.create(model_config.get("override_config") or {}), resolve=True)
    module, hf_config = load_hf_model(model_config.path, kind="token_classification", torch_dtype=torch.float32,
                                      override_config=override,
                                      trust_remote_code=bool(model_config.trust_remote_code))
    hf_config.architectures = [type(module).__name__]  # an HF copy of the value model is a token classifier
    score = module.score
    return {"weight": score.weight.detach().clone(), "bias": score.bias.detach().clone()}, hf_config


def trunk_of(gpt: nn.Module) -> nn.Module:
    """A view of a ``GPTModel``'s embedding and decoder only (parameter names unchanged): what the HF causal-LM
    converters load into a value model, whose head is not in the causal-LM layout."""
    trunk = nn.Module()
    trunk.embedding = gpt.embedding
    trunk.decoder = gpt.decoder
    return trunk
