import pytest


@pytest.fixture(scope="session")
def recipe_data_dir(tmp_path_factory):
    """64 train / 8 test one-digit addition prompts in verl's parquet schema."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path_factory.mktemp("recipe_arithmetic")
    script = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess" / "arithmetic.py"
    subprocess.run([sys.executable, str(script), "--local_dir", str(out), "--train_size", "64", "--test_size", "8",
                    "--digits", "1", "--operators", "+"], check=True, capture_output=True)
    return str(out)
