"""Every recipe run script (CPU and GPU) composes its config and that config validates.

Each script runs with Hydra's ``--cfg job`` (print the composed config, train nothing); the printed tree is
validated like ``main_ppo`` does before Ray starts (GPU scripts without the machine checks: no GPU here).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from omegaconf import OmegaConf

from hybridrl.config import validate_config
from tests.recipes.cli import RECIPES

pytestmark = pytest.mark.slow

SCRIPTS = sorted(str(path.relative_to(RECIPES)) for path in RECIPES.glob("*/run_*.sh"))
OWN = ("dapo", "drgrpo", "rloo", "remax", "reinforce_pp", "gspo", "gpg", "pf_ppo")


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.split("/")[0] in OWN])
def test_run_script_composes_a_valid_config(script, tiny_model_dir, recipe_data_dir, tmp_path):
    env = {**os.environ, "MODEL_PATH": tiny_model_dir, "DATA_DIR": recipe_data_dir, "WORK_DIR": str(tmp_path)}
    if script.endswith("_gpu.sh"):
        env.pop("MODEL_PATH"), env.pop("DATA_DIR")  # the GPU scripts' own defaults (Qwen2.5, ~/data/gsm8k)
    proc = subprocess.run(["bash", str(RECIPES / script), "--cfg", "job"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = OmegaConf.create(proc.stdout)
    validate_config(config, check_env=script.endswith("_cpu.sh"))
    assert config.trainer.experiment_name  # every script names its run
