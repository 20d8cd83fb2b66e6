"""Images in the training forwards: per-row packing, the actor's log-probs and update on tiny Qwen-VL / Idefics3
batches.

Each row's images must reach the model with that row, whatever micro-batching and reordering (token-budget
micro-batches) came before; the reference is one plain HF forward per row with its own image.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from config_testlib import compose_section
from vlm_testlib import shapes_rows, vlm_prompts

from hybridrl.models.multimodal import (
    concat_vision_inputs,
    model_position_ids,
    pack_vision_inputs,
    unpack_vision_inputs,
)
from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.rollout.output import build_rollout_tensors

RESPONSE_LEN = 5
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "idefics3")
# Idefics3 with image splitting: each 56×56 image upscaled to 112 → 4 tiles + the global view = 5 crops per row
IDEFICS3_SPLITTING = {"mm_processor_kwargs": {"do_image_splitting": True, "size": {"longest_edge": 112}},
                      "max_prompt_length": 144}


def image_inputs(patches: int, images: int, fill: float) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.full((patches, 6), fill), "image_grid_thw": torch.tensor([[1, 2, 2]] * images)}


def test_pack_unpack_keeps_each_rows_images_through_a_reorder():
    rows = [image_inputs(4, 1, 1.0), {}, image_inputs(8, 2, 3.0)]  # a text row between two image rows
    packed = pack_vision_inputs(rows)
    assert packed["mm_pixel_values"].shape == (3, 8, 6) and packed["mm_num_patches"].tolist() == [4, 0, 8]
    assert packed["mm_num_images"].tolist() == [1, 0, 2]
    reordered = {key: value[[2, 1, 0]] for key, value in packed.items()}  # what a token-budget split does
    unpacked = unpack_vision_inputs(reordered)
    expected = concat_vision_inputs([rows[2], rows[1], rows[0]])
    assert torch.equal(unpacked["pixel_values"], expected["pixel_values"])
    assert torch.equal(unpacked["image_grid_thw"], expected["image_grid_thw"])
    assert unpack_vision_inputs({k: v[[1]] for k, v in packed.items()}) == {}  # only the text row: no images
    assert pack_vision_inputs([{}, {}]) == {}
    with pytest.raises(NotImplementedError, match="pixel_values_videos"):
        pack_vision_inputs([{"pixel_values_videos": torch.zeros(1)}])


def idefics3_inputs(crops: int, fill: float) -> dict[str, torch.Tensor]:
    """Idefics3's processor layout for one row of N crops: ``pixel_values [1, N, C, H, W]``,
    ``pixel_attention_mask [1, N, H, W]``."""
    mask = torch.ones(1, crops, 4, 4, dtype=torch.long)
    mask[..., 3:] = 0  # a padded column, as an image narrower than the crop has
    return {"pixel_values": torch.full((1, crops, 3, 4, 4), fill), "pixel_attention_mask": mask}


def test_idefics3_crops_and_masks_pack_per_row_through_a_reorder():
    rows = [idefics3_inputs(1, 1.0), {}, idefics3_inputs(5, 3.0)]  # one crop; a text row; 4 tiles + the global view
    packed = pack_vision_inputs(rows)
    assert packed["mm_pixel_values"].shape == (3, 5, 3, 4, 4) and packed["mm_num_patches"].tolist() == [1, 0, 5]
    assert packed["mm_pixel_attention_mask"].shape == (3, 5, 4, 4) and packed["mm_num_crops"].tolist() == [1, 0, 5]
    unpacked = unpack_vision_inputs({key: value[[2, 1, 0]] for key, value in packed.items()})
    expected = concat_vision_inputs([rows[2], rows[1], rows[0]])
    assert expected["pixel_values"].shape == (1, 6, 3, 4, 4)  # one image batch of all crops, in row order
    assert expected["pixel_attention_mask"].shape == (1, 6, 4, 4)
    assert set(unpacked) == set(expected)
    for key in expected:
        assert torch.equal(unpacked[key], expected[key]), key
    with pytest.raises(ValueError, match="same processor"):
        pack_vision_inputs([idefics3_inputs(1, 1.0), image_inputs(4, 1, 1.0)])


def vlm_ppo_batch(tmp_path, model_dir: str, rows: int, seed: int = 0, **data_config):
    """The shapes prompts + random right-padded responses of different lengths, with the PPO keys the actor reads."""
    prompts = vlm_prompts(tmp_path, model_dir, shapes_rows(rows, seed=seed), **data_config)
    gen = torch.Generator().manual_seed(seed)
    responses = torch.randint(5, 200, (rows, RESPONSE_LEN), generator=gen)
    lengths = [RESPONSE_LEN - (i % 3) for i in range(rows)]
    eos = 1  # any id: the response mask comes from the lengths below
    for i, length in enumerate(lengths):
        responses[i, length:] = 0
    tensors = build_rollout_tensors(prompts.batch["input_ids"], prompts.batch["attention_mask"],
                                    prompts.batch["position_ids"], responses, (eos,), None)
    response_mask = torch.zeros(rows, RESPONSE_LEN, dtype=torch.long)
    for i, length in enumerate(lengths):
        response_mask[i, :length] = 1
    tensors["attention_mask"][:, -RESPONSE_LEN:] = response_mask
    tensors.update(response_mask=response_mask, old_log_probs=torch.zeros(rows, RESPONSE_LEN),
                   advantages=torch.randn(rows, RESPONSE_LEN, generator=gen) * response_mask)
    prompts.batch = None
    data = type(prompts).from_dict(tensors=tensors, non_tensors=dict(prompts.non_tensor_batch),
                                   meta_info={"temperature": 1.0})
    return data


def per_row_reference(model, data) -> torch.Tensor:
    """One HF forward per row with only that row's images → response log-probs ``[B, R]``."""
    out = []
    batch = data.batch
    with torch.no_grad():
        for i in range(len(data)):
            logits = model(
                input_ids=batch["input_ids"][i : i + 1], attention_mask=batch["attention_mask"][i : i + 1],
                position_ids=model_position_ids(batch["position_ids"][i : i + 1]),
                **concat_vision_inputs([data.non_tensor_batch["multi_modal_inputs"][i]]),
            ).logits[:, -RESPONSE_LEN - 1 : -1]
            out.append(F.log_softmax(logits.float(), -1).gather(-1, batch["responses"][i : i + 1, :, None])[..., 0])
    return torch.cat(out)


def actor_config(use_remove_padding: bool = False, **overrides):
    section = compose_section("actor_rollout_ref.actor", **{"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2,
                                                            **overrides})
    section.use_remove_padding = use_remove_padding
    return section


def load_vlm(model_dir):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)


@pytest.mark.parametrize("family", FAMILIES)
def test_actor_log_probs_equal_a_forward_per_row(tmp_path, tiny_vlm_dir, family):
    model_dir = tiny_vlm_dir(family)
    model = load_vlm(model_dir)
    data = vlm_ppo_batch(tmp_path, model_dir, rows=4, **(IDEFICS3_SPLITTING if family == "idefics3" else {}))
    # token-budget micro-batches reorder the rows: each must still meet its own image
    data.meta_info.update(micro_batch_size=2, use_dynamic_bsz=True, max_token_len=2 * data.batch["input_ids"].shape[1])
    log_probs, _ = DataParallelPPOActor(actor_config(), model).compute_log_prob(data)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(log_probs[mask], per_row_reference(model, data)[mask], rtol=1e-5, atol=1e-5)


def vision_tower(model):
    return model.model.vision_model if hasattr(model.model, "vision_model") else model.model.visual  # Idefics3 / Qwen


@pytest.mark.parametrize("family", ("qwen2_vl", "idefics3"))
def test_one_update_changes_the_loss_and_packed_forward_is_refused(tmp_path, tiny_vlm_dir, family):
    model_dir = tiny_vlm_dir(family)
    model = copy.deepcopy(load_vlm(model_dir))
    data = vlm_ppo_batch(tmp_path, model_dir, rows=4)
    data.meta_info.update(micro_batch_size=2)
    reference = DataParallelPPOActor(actor_config(), model)
    data.batch["old_log_probs"] = reference.compute_log_prob(data)[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    actor = DataParallelPPOActor(actor_config(ppo_epochs=2), model, optimizer)
    metrics = actor.update_policy(data)
    losses = metrics["actor/pg_loss"]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[1] != losses[0] and metrics["actor/grad_norm"][0] > 0
    vision_before = vision_tower(load_vlm(model_dir)).state_dict()
    assert any(not torch.equal(v, vision_tower(model).state_dict()[k]) for k, v in vision_before.items())

    packed = DataParallelPPOActor(actor_config(use_remove_padding=True), model)
    with pytest.raises(NotImplementedError, match="use_remove_padding=False"):
        packed.compute_log_prob(data)
