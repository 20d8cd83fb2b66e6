"""verl's script path for the HF → megatron-core dist checkpoint converter (``megatron.use_dist_checkpointing``).

    python scripts/converter_hf_to_mcore.py --hf_model_path <HF folder> --output_path <folder> [--test]

The same as ``python -m hybridrl.workers.megatron.converter_hf_to_mcore`` (run it with ``.venv-megatron``).
"""

from hybridrl.workers.megatron.converter_hf_to_mcore import main

if __name__ == "__main__":  # megatron-core's save starts helper processes (spawn): keep the entry guarded
    main()
