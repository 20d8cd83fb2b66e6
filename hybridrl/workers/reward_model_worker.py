"""``RewardModelWorker``: a token-classification reward model scoring whole responses (verl 0.5 API).

    compute_rm_score  input_ids, responses, attention_mask, position_ids (+ raw_prompt) → rm_scores [B, R]

The score is the model's output at the last valid token of each sequence; it is placed on the last
valid response token of ``rm_scores`` and every other entry is 0 (as a rule-based reward manager
places its score). When the reward model uses another tokenizer than the policy
(``reward_model.model.input_tokenizer`` set and different from ``reward_model.model.path``), the
prompt (``non_tensor_batch["raw_prompt"]``, chat messages) and the decoded response are re-rendered
with the RM's chat template and re-tokenised, right-padded to ``reward_model.max_length``.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.config.batch_plan import ForwardPlan
from hybridrl.config.worker_plan import standalone_batch_plan
from hybridrl.protocol import DataProto
from hybridrl.single_controller.base import Worker
from hybridrl.single_controller.base.decorator import Dispatch, register
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.device import current_device, get_device_name
from hybridrl.utils.distributed import init_worker_distributed
from hybridrl.utils.remove_padding import pack_sequences
from hybridrl.utils.torch_functional import compute_position_id_with_mask, postprocess_data
from hybridrl.utils.ulysses import sp_token_budget
from hybridrl.workers import engine
from hybridrl.workers.actor.forward import forward_packed_all_positions, restore_order, split_micro_batches
from hybridrl.workers.actor.knobs import compute_dtype_context
from hybridrl.workers.engine import ModelSpec, build_fsdp_module
from hybridrl.workers.sharding_manager.fsdp_ulysses import UlyssesShardingManager, sp_group_from_config

__all__ = ["RewardModelWorker", "expand_to_token_level", "last_token_index"]


def last_token_index(attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """Index of the last valid token of each row, ``argmax(position_ids · attention_mask)``: ``[B, S]`` → ``[B]``."""
    return torch.argmax(position_ids * attention_mask, dim=-1)


def expand_to_token_level(data: DataProto, scores: torch.Tensor) -> torch.Tensor:
    """Put one score per sequence on its last valid token and return the response part ``[B, R]``."""
    batch = data.batch
    response_length = batch["responses"].shape[-1]
    last = last_token_index(batch["attention_mask"], batch["position_ids"])
    token_level = torch.zeros(batch["attention_mask"].shape, dtype=scores.dtype, device=scores.device)
    token_level[torch.arange(scores.shape[0], device=scores.device), last] = scores
    return token_level[:, -response_length:]


class RewardModelWorker(Worker):
    """Reward-model worker.

    Args:
        config: the ``reward_model`` section (verl keys). ``ulysses_sequence_parallel_size > 1`` (with
            ``model.use_remove_padding``) slices each packed sequence over an SP group, as the actor and critic.
        plan: the driver's micro-batching of the scoring pass; None computes it from ``config`` and this group.
    """

    def __init__(self, config: Any, plan: ForwardPlan | None = None) -> None:
        super().__init__()
        self.config = section_with_defaults(config, "reward_model")
        self._device_name = get_device_name()
        world_size = init_worker_distributed(self._device_name)
        if plan is None:
            plan = self._standalone_plan(world_size)
        self.plan = plan.require("reward_model.micro_batch_size_per_gpu")
        self.ulysses = UlyssesShardingManager(sp_group_from_config(self.config, "reward_model"))

    def _standalone_plan(self, world_size: int) -> ForwardPlan:
        """The scoring pass's micro-batching of an RM built without a plan: this group is the world."""
        return standalone_batch_plan(self.config, "reward_model", world_size, ["reward_model."]).reward_model

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the RM (``num_labels=1``, frozen) and its tokenizer; the policy's tokenizer too when they differ."""
        model_config = self.config.model
        trust_remote_code = bool(model_config.trust_remote_code)
        input_tokenizer = model_config.get("input_tokenizer")
        self._switch_template = input_tokenizer is not None and str(input_tokenizer) != str(model_config.path)
        self.tokenizer = engine.build_tokenizer(model_config.path, trust_remote_code=trust_remote_code)
        if self._switch_template:
            self.input_tokenizer = engine.build_tokenizer(input_tokenizer, trust_remote_code=trust_remote_code)
        self.reward_module = self._build_reward_module()
        self.use_remove_padding = bool(model_config.use_remove_padding)

    def _build_reward_module(self) -> torch.nn.Module:
        """The frozen RM (FSDP-wrapped): ``module(input_ids, attention_mask, position_ids).logits [B, S, 1]``."""
        model_config = self.config.model
        spec = ModelSpec(
            model_config,
            model_config.get("fsdp_config", {}),
            self.config.strategy,
            "token_classification",
            False,
            self.ulysses.group,
        )
        module, _ = build_fsdp_module(spec, self._device_name)
        return module

    def _forward_micro_batch(self, micro_batch: Any) -> torch.Tensor:
        """Score ``[B]``: the RM output at each sequence's last valid token."""
        input_ids, attention_mask = micro_batch["input_ids"], micro_batch["attention_mask"]
        position_ids = micro_batch["position_ids"]
        with torch.no_grad(), compute_dtype_context(self._device_name):
            if self.use_remove_padding:
                packed = pack_sequences(input_ids, attention_mask, position_ids)
                (values,) = forward_packed_all_positions(
                    self.reward_module, packed, lambda logits, _next: [logits.squeeze(-1)]
                )
                scores = packed.pad(values.squeeze(0))  # [B, S]
            else:
                logits = self.reward_module(
                    input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
                ).logits
                scores = logits.squeeze(-1)  # [B, S]
        last = last_token_index(attention_mask, position_ids)
        return scores[torch.arange(scores.shape[0], device=scores.device), last]

    def _switch_chat_template(self, data: DataProto) -> DataProto:
        """Re-render prompt + decoded response with the RM's chat template and re-tokenise (right-padded)."""
        if "raw_prompt" not in data.non_tensor_batch:
            raise KeyError(
                "reward_model.model.input_tokenizer differs from the RM tokenizer, so the RM needs the chat messages: "
                "set data.return_raw_chat=True (non_tensor_batch['raw_prompt'])."
            )
        batch = data.batch
        response_length = batch["responses"].shape[-1]
        max_length = self.config.get("max_length") or batch["attention_mask"].shape[-1]
        rows_ids, rows_mask = [], []
        for row in range(len(data)):
            chat = list(data.non_tensor_batch["raw_prompt"][row])
            valid = int(batch["attention_mask"][row, -response_length:].sum())
            response = self.input_tokenizer.decode(batch["responses"][row, :valid].tolist())
            if self.input_tokenizer.eos_token:
                response = response.replace(self.input_tokenizer.eos_token, "")
            chat.append({"role": "assistant", "content": response})
            text = self.tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
            encoded = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
            ids, mask = postprocess_data(
                encoded["input_ids"],
                encoded["attention_mask"],
                max_length=max_length,
                pad_token_id=self.tokenizer.pad_token_id,
                left_pad=False,
                # not a key of the YAML's reward_model section: verl reads it with this default
                truncation=self.config.get("truncation") or "right",
            )
            rows_ids.append(ids)
            rows_mask.append(mask)
        attention_mask = torch.cat(rows_mask)
        tensors = {
            "input_ids": torch.cat(rows_ids),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
        }
        return DataProto.from_dict(tensors=tensors)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores [B, R]``: the sequence score on the last valid response token, zeros elsewhere."""
        data = self.ulysses.preprocess_data(data.to(current_device()))
        if self._switch_template:
            rm_data = self._switch_chat_template(data)
        else:
            rm_data = data.select(batch_keys=["input_ids", "attention_mask", "position_ids"])
        micro_batches, order = split_micro_batches(
            rm_data.batch,
            self.plan.micro_batch_per_rank,
            self.plan.use_dynamic_bsz,
            sp_token_budget(self.plan.token_budget_per_rank, self.ulysses.sp_size),
        )
        scores = torch.cat([self._forward_micro_batch(micro) for micro in micro_batches])
        scores = restore_order(scores, order)
        token_level_scores = expand_to_token_level(data, scores)
        output = DataProto.from_dict(tensors={"rm_scores": token_level_scores})
        return self.ulysses.postprocess_data(output).to("cpu")
