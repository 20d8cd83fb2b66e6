"""The tiny VLMs: each family loads offline with its processor, sees the image in its forward and generates."""

import pytest
import torch
from PIL import Image

from hybridrl.models.tiny_vlm import FAMILIES
from hybridrl.utils.tokenizer import hf_processor

VISION_TOKENS_PER_IMAGE = 4  # 56×56 → 2×2 merged patches (Qwen) or a 4×4 grid shuffled by 2 (Idefics3)


def _prompt_inputs(processor, image):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what colour"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=[text], images=[image], return_tensors="pt")


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_vlm_sees_the_image_and_generates(tiny_vlm_dir, family):
    from transformers import AutoModelForImageTextToText

    path = tiny_vlm_dir(family)
    processor = hf_processor(path)
    model = AutoModelForImageTextToText.from_pretrained(path).eval()
    text_config = model.config.get_text_config()
    assert text_config.hidden_size // text_config.num_attention_heads == 32  # head_dim, as vLLM's CPU kernels need
    red = _prompt_inputs(processor, Image.new("RGB", (56, 56), (255, 0, 0)))
    blue = _prompt_inputs(processor, Image.new("RGB", (56, 56), (0, 0, 255)))
    image_token_id = model.config.image_token_id
    assert int((red["input_ids"] == image_token_id).sum()) == VISION_TOKENS_PER_IMAGE
    with torch.no_grad():
        red_logits = model(**red).logits
        blue_logits = model(**blue).logits
    assert red_logits.shape == (1, red["input_ids"].shape[1], model.config.get_text_config().vocab_size)
    assert not torch.allclose(red_logits[0, -1], blue_logits[0, -1])  # the pixels reach the language model

    generated = model.generate(**red, max_new_tokens=3, do_sample=False)
    prompt_length = red["input_ids"].shape[1]
    assert torch.equal(generated[0, :prompt_length], red["input_ids"][0])
    assert generated[0, prompt_length] == red_logits[0, -1].argmax()  # greedy step 1 = the forward's argmax
