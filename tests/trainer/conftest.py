import pytest


@pytest.fixture(scope="session")
def arithmetic_data_dir(tmp_path_factory):
    """16 train / 8 test one-digit addition prompts in verl's parquet schema (2 steps per epoch at batch 8)."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path_factory.mktemp("arithmetic")
    script = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess" / "arithmetic.py"
    subprocess.run([sys.executable, str(script), "--local_dir", str(out), "--train_size", "16", "--test_size", "8",
                    "--digits", "1", "--operators", "+"], check=True, capture_output=True)
    return str(out)
