import importlib.util
from pathlib import Path

import pytest

CALCULATOR = Path(__file__).resolve().parents[2] / "examples" / "agent_calculator"


@pytest.fixture(scope="session")
def calculator_model_dir(tmp_path_factory) -> Path:
    """The agent_calculator demo's random model with its digit tokenizer (BPE trained on the demo's text), at the
    CI smokes' small size; built once for the examples that run on it (agent_calculator, agents_in_your_code)."""
    spec = importlib.util.spec_from_file_location("agent_calculator_build_model", CALCULATOR / "build_model.py")
    build_model = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(build_model)
    small = build_model.TinyModelSpec(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, tokenizer_vocab_size=384)
    return build_model.build_model(tmp_path_factory.mktemp("calculator_model"), small)
