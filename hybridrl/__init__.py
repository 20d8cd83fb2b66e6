"""hybridrl: a faithful, clean reimplementation of HybridFlow (verl) RL post-training for LLMs."""

__version__ = "0.1.0"


def __getattr__(name: str) -> type:
    # Lazy so `import hybridrl` stays cheap (no torch import until DataProto is used).
    if name == "DataProto":
        from hybridrl.protocol import DataProto

        return DataProto
    raise AttributeError(name)
