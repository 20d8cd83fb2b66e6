"""Utilities of hybridrl (verl's ``verl.utils``). Importing a submodule stays cheap: this package only
re-exports the helpers verl exports here (tokenizer loading, ``omega_conf_to_dataclass``); their modules import no
torch, no Ray."""

from hybridrl.utils.config import omega_conf_to_dataclass
from hybridrl.utils.tokenizer import hf_processor, hf_tokenizer

__all__ = ["hf_processor", "hf_tokenizer", "omega_conf_to_dataclass"]
