"""verl's ``HFModelConfig`` (``verl.workers.config.model``): the Hugging Face model a worker loads.

Defaults from the YAML's ``actor_rollout_ref.model``. On construction the paths are completed as in verl
(``hf_config_path`` / ``tokenizer_path`` default to ``path``); when ``path`` is a local folder its HF config,
generation config and (``load_tokenizer``) tokenizer / processor are loaded into ``hf_config``,
``generation_config``, ``tokenizer`` and ``processor``. A hub id is left unloaded here: the workers resolve it.
"""

import os
from dataclasses import field
from typing import Any

from hybridrl.base_config import BaseConfig, yaml_dataclass

__all__ = ["HFModelConfig"]


def check_target_modules(value: Any) -> None:
    """``target_modules`` is ``all-linear``-style string, a list of module names, or None."""
    if value is None or isinstance(value, str):
        return
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return
    raise TypeError(f"target_modules must be a string or a list of strings, got {value!r}")


@yaml_dataclass("actor_rollout_ref.model", extra_keys=True)
class HFModelConfig(BaseConfig):
    """Model path, LoRA, kernels and the HF objects loaded from a local ``path``."""

    _mutable_fields = frozenset(
        {
            "model_type",
            "hf_config_path",
            "tokenizer_path",
            "hf_config",
            "generation_config",
            "tokenizer",
            "processor",
            "local_path",
            "local_hf_config_path",
            "local_tokenizer_path",
            "architectures",
        }
    )

    path: str
    custom_chat_template: str | None
    use_shm: bool
    external_lib: str | None
    override_config: dict
    enable_gradient_checkpointing: bool
    enable_activation_offload: bool
    use_remove_padding: bool
    lora_rank: int
    lora_alpha: int
    target_modules: Any | None  # "all-linear" or a list of module names
    exclude_modules: str | None
    use_liger: bool
    use_fused_kernels: bool
    fused_kernel_options: dict
    trust_remote_code: bool
    local_path: str | None = None
    hf_config_path: str | None = None
    local_hf_config_path: str | None = None
    tokenizer_path: str | None = None
    local_tokenizer_path: str | None = None
    model_type: str = "language_model"
    load_tokenizer: bool = True
    hf_config: Any = None
    generation_config: Any = None
    tokenizer: Any = None
    processor: Any = None
    target_parameters: list[str] | None = None
    lora: dict[str, Any] = field(default_factory=dict)
    lora_adapter_path: str | None = None
    tiled_mlp: dict = field(default_factory=lambda: {"enabled": False, "num_shards": 4})
    architectures: list[str] | None = None

    def __post_init__(self) -> None:
        check_target_modules(self.target_modules)
        self.hf_config_path = self.hf_config_path or self.path
        self.tokenizer_path = self.tokenizer_path or self.path
        self.local_path = os.path.expanduser(self.path)
        self.local_hf_config_path = os.path.expanduser(self.hf_config_path)
        self.local_tokenizer_path = os.path.expanduser(self.tokenizer_path)
        if os.path.isdir(self.local_hf_config_path):
            self._load_hf_objects()

    def _load_hf_objects(self) -> None:
        from transformers import AutoConfig, GenerationConfig

        from hybridrl.utils.tokenizer import hf_processor, hf_tokenizer

        remote = self.trust_remote_code
        if self.load_tokenizer and os.path.isdir(self.local_tokenizer_path):
            self.tokenizer = hf_tokenizer(self.local_tokenizer_path, trust_remote_code=remote)
            self.processor = hf_processor(self.local_tokenizer_path, trust_remote_code=remote)
            if self.custom_chat_template is not None:
                (self.processor or self.tokenizer).chat_template = self.custom_chat_template
        self.hf_config = AutoConfig.from_pretrained(self.local_hf_config_path, trust_remote_code=remote)
        for key, value in self.override_config.items():
            setattr(self.hf_config, key, value)
        try:
            self.generation_config = GenerationConfig.from_pretrained(self.local_hf_config_path)
        except OSError:  # a folder without generation_config.json: verl falls back to None too
            self.generation_config = None
        self.architectures = list(getattr(self.hf_config, "architectures", None) or [])

    def get_processor(self) -> Any:
        """The processor when the model has one, else the tokenizer (verl's accessor)."""
        return self.processor if self.processor is not None else self.tokenizer
