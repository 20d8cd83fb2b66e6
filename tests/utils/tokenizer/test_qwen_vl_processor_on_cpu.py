"""QwenVLImageProcessor: image tokens expanded from image_grid_thw and merge_size, and mismatches refused."""

import pytest
import torch
from PIL import Image

from hybridrl.utils.tokenizer import hf_processor
from hybridrl.utils.tokenizer.qwen_vl_processor import IMAGE_TOKEN, QwenVLImageProcessor


@pytest.fixture(scope="module")
def processor(tiny_vlm_dir):
    processor = hf_processor(tiny_vlm_dir("qwen2_vl"))  # AutoProcessor needs torchvision here: the fallback
    assert isinstance(processor, QwenVLImageProcessor)
    return processor


def test_each_image_token_expands_to_its_vision_tokens(processor):
    small, wide = Image.new("RGB", (56, 56)), Image.new("RGB", (112, 56))
    out = processor(text=[f"a{IMAGE_TOKEN}b{IMAGE_TOKEN}c"], images=[small, wide], return_tensors="pt")
    # 56×56 → grid (1, 4, 4) of 14-pixel patches; 112 wide × 56 high is resized to the tiny model's 56*56-pixel
    # cap: 56 × 28 → (1, 2, 4); merge 2×2 → 16/4 = 4 and 8/4 = 2 vision tokens
    assert out["image_grid_thw"].tolist() == [[1, 4, 4], [1, 2, 4]]
    assert out["pixel_values"].shape[0] == 16 + 8
    assert int((out["input_ids"] == processor.image_token_id).sum()) == 4 + 2
    assert torch.equal(out["mm_token_type_ids"], (out["input_ids"] == processor.image_token_id).long())


@pytest.mark.parametrize("num_tokens, num_images", [(2, 1), (1, 2)])
def test_token_and_image_counts_must_agree(processor, num_tokens, num_images):
    with pytest.raises(ValueError, match="image"):
        processor(text=IMAGE_TOKEN * num_tokens, images=[Image.new("RGB", (56, 56))] * num_images)


def test_videos_are_refused_naming_torchvision(processor):
    with pytest.raises(NotImplementedError, match="torchvision"):
        processor(text="x", videos=[[Image.new("RGB", (56, 56))]])


def test_text_only_folder_has_no_processor(tiny_model_dir):
    assert hf_processor(tiny_model_dir) is None
