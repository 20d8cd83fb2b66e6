"""Generation's contract, shared by every path that asks an engine for tokens (sampling settings, request records)."""
