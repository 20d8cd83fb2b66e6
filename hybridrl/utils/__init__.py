"""Utilities of hybridrl (verl's ``verl.utils``). Importing a submodule stays cheap: this package only
re-exports the tokenizer helpers verl exports here, and their module imports no torch, no Ray."""

from hybridrl.utils.tokenizer import hf_processor, hf_tokenizer

__all__ = ["hf_processor", "hf_tokenizer"]
