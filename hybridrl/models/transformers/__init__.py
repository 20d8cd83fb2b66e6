"""Attention backends and patches of Hugging Face transformers models (verl's ``verl.models.transformers``)."""
