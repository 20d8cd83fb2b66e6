"""Model-specific code: what hybridrl's fast paths do to a Hugging Face model, and for which families.

    families.py       the registry, one table: which model families (HF ``model_type``) each fast path supports
    tiny.py           tiny random models with a locally trained tokenizer (tests, demos, CI)
    tiny_vlm.py       tiny random vision-language models (Qwen2/2.5/3-VL, Idefics3) with their processors
    multimodal.py     a batch's images for the model: per-row packing, mrope position ids, the padded VLM forward
    image_fingerprint.py  the rollout/training image check (each sample's images as the rollout saw them)
    transformers/     attention backends and patches of transformers models: varlen, grouped, fp32 (upcast)
                      and Ulysses attention, the blocked log-prob head, the packed output head, the
                      preallocated KV cache and the KV-cache helpers across transformers versions

A low layer: it imports ``utils`` and ``protocol`` only (``workers``, ``trainer``, ``experimental`` and
``serving`` ask it).
"""
