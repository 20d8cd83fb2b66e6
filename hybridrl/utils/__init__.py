"""Utilities of hybridrl. Kept empty so importing a submodule stays cheap (no torch, no ray)."""
