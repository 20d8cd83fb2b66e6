"""The GPU kit: one script that checks hybridrl's GPU paths on a bare CUDA machine (no Ray, no vLLM, no internet).

    bash scripts/gpu_check.sh [--dry-run] [--wheels DIR] [--budget-s 480] [--only sft,mfu] [--json FILE]

    orchestrate.py ── one subprocess per check (child.py), each with a timeout cut to the budget left
       │              ──► "PASS|FAIL|SKIP <check> <detail>" per check, then a JSON of figures
       ├─ environment   torch / CUDA / bf16, hybridrl's pure-Python deps (installed from --wheels when missing)
       ├─ attention     masked bf16 SDPA backward finite under hybridrl's backends (cuDNN's Hopper NaN bug recorded)
       ├─ sft           torchrun -m hybridrl.trainer.fsdp_sft_trainer: FSDP2, NCCL, bf16, 3 steps
       ├─ worker        ActorRolloutRefWorker without Ray: log-prob pass + one actor update
       ├─ rollout       the hf rollout on the device: sequences, rollout vs actor log-probs
       ├─ offload       param_offload / optimizer_offload: device memory drops, the update still runs
       └─ mfu           bf16 matmul peak and the actor update's FLOP/s against the GPU's bf16 dense peak

``--dry-run`` runs every check on the CPU (gloo, tiny sizes): the test suite runs it
(tests/scripts/test_gpu_check_dry_run_on_cpu.py). Checks whose claim needs a GPU report SKIP there, after running
their code path. Models and data are built locally (hybridrl.models.tiny); nothing is downloaded.
"""
