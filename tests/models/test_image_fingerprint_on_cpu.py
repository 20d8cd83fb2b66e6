"""The rollout/training image check with planted failures: a dropped image, two rows' images swapped, and a
processor resize that changes the vision-token count each fail the update naming the sample; a clean batch passes
and is counted."""

from __future__ import annotations

import copy

import pytest
import torch
from vlm_testlib import shapes_rows, vlm_prompts

from hybridrl.models.image_fingerprint import FINGERPRINT_KEY, check_images, image_fingerprint
from hybridrl.models.multimodal import CHECKED_IMAGES_METRIC
from hybridrl.utils.tokenizer import hf_processor, hf_tokenizer
from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.rollout.hf_rollout import HFRollout

ROWS, RESPONSE_LEN = 3, 4


@pytest.fixture(scope="module")
def rollout_batch(tiny_vlm_dir, tmp_path_factory):
    """The tiny Qwen2-VL, and its hf rollout's output on 3 shapes prompts (with the recorded fingerprints) plus the
    keys an update reads."""
    return make_rollout_batch(tiny_vlm_dir("qwen2_vl"), tmp_path_factory.mktemp("shapes"))


def make_rollout_batch(model_dir, tmp_path):
    from config_testlib import compose_section
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = hf_tokenizer(model_dir)
    config = compose_section("actor_rollout_ref.rollout", name="hf", response_length=RESPONSE_LEN, prompt_length=64,
                             dtype="float32", calculate_log_probs=False, seed=0, tensor_model_parallel_size=1)
    engine = HFRollout(copy.deepcopy(model), config, eos_token_ids=[tokenizer.eos_token_id],
                       pad_token_id=tokenizer.pad_token_id)
    prompts = vlm_prompts(tmp_path, model_dir, shapes_rows(ROWS))
    prompts.non_tensor_batch["uid"] = __import__("numpy").array([f"u{i}" for i in range(ROWS)], dtype=object)
    out = engine.generate_sequences(prompts)
    out.batch["response_mask"] = out.batch["attention_mask"][:, -RESPONSE_LEN:]
    out.batch["advantages"] = torch.ones(ROWS, RESPONSE_LEN) * out.batch["response_mask"]
    out.batch["old_log_probs"] = torch.zeros(ROWS, RESPONSE_LEN)
    out.meta_info["temperature"] = 1.0
    return model_dir, model, out


def update(model, data):
    from config_testlib import compose_section

    config = compose_section("actor_rollout_ref.actor", ppo_mini_batch_size=ROWS, ppo_micro_batch_size_per_gpu=ROWS)
    config.use_remove_padding = False
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    return DataParallelPPOActor(config, model, optimizer).update_policy(data)


def test_the_rollout_records_what_it_showed_and_a_clean_update_is_counted(rollout_batch):
    model_dir, model, out = rollout_batch
    recorded = out.non_tensor_batch[FINGERPRINT_KEY]
    assert recorded[0].startswith("images=1 grids=1x4x4 pixels=") and recorded[0].endswith(" tokens=4")
    assert len(set(recorded)) == ROWS  # three different images
    assert update(model, out)[CHECKED_IMAGES_METRIC] == [float(ROWS)]


def test_a_dropped_image_fails_the_update_naming_the_sample(rollout_batch):
    _, model, out = rollout_batch
    planted = copy.deepcopy(out)
    planted.non_tensor_batch["multi_modal_inputs"][1] = {}
    with pytest.raises(ValueError, match=r"sample 1 \(uid u1\): its prompt holds 4 vision tokens but its images make 0"):
        update(model, planted)


def test_two_rows_images_swapped_fail_the_update(rollout_batch):
    _, model, out = rollout_batch
    planted = copy.deepcopy(out)
    inputs = planted.non_tensor_batch["multi_modal_inputs"]
    inputs[0], inputs[2] = inputs[2], inputs[0]  # the token counts agree: only the fingerprint sees it
    with pytest.raises(ValueError, match=r"sample 0 \(uid u0\): pixels: rollout \w+, training \w+.*sample 2 \(uid u2\)"):
        update(model, planted)


def test_a_processor_resize_fails_the_check(rollout_batch):
    model_dir, model, out = rollout_batch
    images = [data["image"][0] for data in out.non_tensor_batch["multi_modal_data"]]
    small = hf_processor(model_dir).image_processor(images=images[:1], return_tensors="pt",
                                                    size={"shortest_edge": 28 * 28, "longest_edge": 28 * 28})
    planted = dict(out.non_tensor_batch)
    planted["multi_modal_inputs"] = [{"pixel_values": small["pixel_values"], "image_grid_thw": small["image_grid_thw"]},
                                     *out.non_tensor_batch["multi_modal_inputs"][1:]]
    prompt_ids = out.batch["prompts"]
    with pytest.raises(ValueError, match=r"sample 0 \(uid u0\): its prompt holds 4 vision tokens but its images make 1"
                                         r".*grids: rollout 1x4x4, training 1x2x2"):
        check_images(prompt_ids, planted, model.config)
    # without the rollout's record the prompt/image count check alone still refuses it
    planted.pop(FINGERPRINT_KEY)
    with pytest.raises(ValueError, match="images make 1"):
        check_images(prompt_ids, planted, model.config)


def test_idefics3_swapped_images_and_a_split_are_caught(tiny_vlm_dir, tmp_path):
    """Idefics3 (1-D rope, crops + pixel_attention_mask): the same checks through its own inputs."""
    model_dir, model, out = make_rollout_batch(tiny_vlm_dir("idefics3"), tmp_path)
    recorded = out.non_tensor_batch[FINGERPRINT_KEY]
    assert recorded[0].startswith("images=1 grids=56x56 pixels=") and recorded[0].endswith(" tokens=4")
    assert update(model, out)[CHECKED_IMAGES_METRIC] == [float(ROWS)]
    swapped = copy.deepcopy(out)
    inputs = swapped.non_tensor_batch["multi_modal_inputs"]
    inputs[0], inputs[1] = inputs[1], inputs[0]
    with pytest.raises(ValueError, match=r"sample 0 \(uid u0\): pixels: rollout \w+, training \w+.*sample 1"):
        update(model, swapped)
    # the processor run again with image splitting: 4 tiles + the global view = 5 crops, 20 vision tokens
    image = out.non_tensor_batch["multi_modal_data"][0]["image"][0]
    split = hf_processor(model_dir).image_processor(images=[image], return_tensors="pt", do_image_splitting=True,
                                                    size={"longest_edge": 112})
    planted = dict(out.non_tensor_batch)
    planted["multi_modal_inputs"] = [dict(split), *out.non_tensor_batch["multi_modal_inputs"][1:]]
    with pytest.raises(ValueError, match=r"sample 0 \(uid u0\): its prompt holds 4 vision tokens but its images make "
                                         r"20.*images: rollout 1, training 5"):
        check_images(out.batch["prompts"], planted, model.config)


def test_a_text_batch_is_not_checked():
    assert check_images(torch.zeros(2, 5, dtype=torch.long), {"multi_modal_inputs": [{}, {}]},
                        type("Config", (), {"image_token_id": 7})()) == 0
    assert image_fingerprint({}, 0) == "images=0 grids=- pixels=- tokens=0"
