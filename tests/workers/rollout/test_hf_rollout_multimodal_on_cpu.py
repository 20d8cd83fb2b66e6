"""The hf engine with images: prompts carrying ``multi_modal_inputs`` generate with their vision tokens attended.

Tiny random Qwen2-VL and Idefics3 models (matrices redrawn at std 0.3 so that the decode depends on its input) on
the shapes task's prompts: greedy tokens equal ``transformers.generate`` on each row with its own images, sampled
tokens change with the image under a fixed seed, and the output keeps each sample's ``multi_modal_inputs`` and
extends the position ids (mrope ``[B, 3, S]`` or 1-D ``[B, S]``).
"""

from __future__ import annotations

import pytest
import torch
from rollout_testlib import rollout_config
from vlm_testlib import shapes_rows, vlm_prompts

from hybridrl.utils.tokenizer import hf_tokenizer
from hybridrl.workers.rollout.hf_rollout import HFRollout, left_pad

RESPONSE_LENGTH = 6


def random_vlm(model_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return model_dir, model


@pytest.fixture(scope="module")
def qwen2_vl(tiny_vlm_dir):
    return random_vlm(tiny_vlm_dir("qwen2_vl"))


def engine(model_dir, model, **overrides):
    tokenizer = hf_tokenizer(model_dir)
    config = rollout_config(response_length=RESPONSE_LENGTH, **overrides)
    return HFRollout(model, config, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)


@pytest.mark.parametrize("family", ("qwen2_vl", "idefics3"))
def test_greedy_equals_generate_and_output_keeps_images(tmp_path, tiny_vlm_dir, family):
    model_dir, model = random_vlm(tiny_vlm_dir(family))
    prompts = vlm_prompts(tmp_path, model_dir, shapes_rows(3))
    prompts.meta_info.update(do_sample=False)
    # the trainer repeats each row rollout.n = 2 times before the call; micro-batches of 2 split a row's pair apart
    rollout = engine(model_dir, model, micro_batch_size=3)
    out = rollout.generate_sequences(prompts.repeat(2, interleave=True))

    rows = prompts.batch["input_ids"].shape[0]
    inputs = list(prompts.non_tensor_batch["multi_modal_inputs"])
    with torch.no_grad():  # plain HF generate, one row at a time with the processor's own outputs for its images
        expected = torch.cat([model.generate(
            input_ids=prompts.batch["input_ids"][i : i + 1], attention_mask=prompts.batch["attention_mask"][i : i + 1],
            **inputs[i], do_sample=False, max_new_tokens=RESPONSE_LENGTH, eos_token_id=None,
            suppress_tokens=rollout._vision_placeholder_ids(),  # the image placeholder id, as the engine does
        )[:, -RESPONSE_LENGTH:] for i in range(rows)])
    responses = out.batch["responses"]
    assert responses.shape == (2 * rows, RESPONSE_LENGTH)
    eos = hf_tokenizer(model_dir).eos_token_id
    for i in range(rows):
        for sample in (2 * i, 2 * i + 1):  # n=2: both greedy samples of row i
            got = responses[sample][out.batch["attention_mask"][sample, -RESPONSE_LENGTH:].bool()]
            want = expected[i][: len(got)]
            assert torch.equal(got, want), (i, got, want)
            assert len(got) == RESPONSE_LENGTH or int(got[-1]) == eos
        # each sample keeps its row's images
        kept = out.non_tensor_batch["multi_modal_inputs"][2 * i + 1]
        assert torch.equal(kept["pixel_values"], inputs[i]["pixel_values"])
    # positions [B, 3, P + R] (mrope) or [B, P + R]: the response continues from the last prompt position
    position_ids = out.batch["position_ids"]
    prompt_length = prompts.batch["input_ids"].shape[1]
    rope_rows = (3,) if family == "qwen2_vl" else ()
    assert position_ids.shape == (2 * rows, *rope_rows, prompt_length + RESPONSE_LENGTH)
    last = position_ids[..., prompt_length - 1 : prompt_length]
    assert torch.equal(position_ids[..., prompt_length:], last + torch.arange(1, RESPONSE_LENGTH + 1))


@pytest.mark.parametrize("family", ("qwen2_vl", "idefics3"))
def test_sampled_tokens_change_with_the_image(tmp_path, tiny_vlm_dir, family):
    model_dir, model = random_vlm(tiny_vlm_dir(family))
    rows = shapes_rows(4)
    swapped = [{**row, "images": rows[(i + 1) % len(rows)]["images"]} for i, row in enumerate(rows)]

    def sample(batch_rows, name):
        prompts = vlm_prompts(tmp_path / name, model_dir, batch_rows)
        prompts.meta_info.update(do_sample=True, temperature=1.0, global_steps=1)
        return engine(model_dir, model).generate_sequences(prompts).batch["responses"]

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    first = sample(rows, "a")
    assert torch.equal(first, sample(rows, "b"))  # same seed, step and images: the same samples
    assert not torch.equal(first, sample(swapped, "c"))  # the same text with other images: other samples
    assert not bool((first == model.config.image_token_id).any())  # placeholders are never sampled


def test_images_without_inputs_are_refused(tmp_path, qwen2_vl):
    model_dir, model = qwen2_vl
    prompts = vlm_prompts(tmp_path, model_dir, shapes_rows(1))
    prompts.non_tensor_batch.pop("multi_modal_inputs")
    prompts.meta_info.update(do_sample=False)
    with pytest.raises(ValueError, match="data.return_multi_modal_inputs=True"):
        engine(model_dir, model).generate_sequences(prompts)


def test_left_pad_is_the_rollout_layout():
    input_ids, mask = left_pad([[1, 2], [3]], 0, torch.device("cpu"))
    assert input_ids.tolist() == [[1, 2], [0, 3]] and mask.tolist() == [[1, 1], [0, 1]]
