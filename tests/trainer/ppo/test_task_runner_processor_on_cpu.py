"""TaskRunner loads the model's multimodal processor with its tokenizer (None for a text model)."""

from omegaconf import OmegaConf

from hybridrl.trainer.ppo.task_runner import load_tokenizer_and_processor
from hybridrl.utils.tokenizer.qwen_vl_processor import QwenVLImageProcessor


def model_section(path):
    return OmegaConf.create({"path": path, "trust_remote_code": False})


def test_vision_language_model_gets_its_processor(tiny_vlm_dir):
    tokenizer, processor = load_tokenizer_and_processor(model_section(tiny_vlm_dir("qwen2_vl")))
    assert isinstance(processor, QwenVLImageProcessor)
    assert tokenizer.convert_tokens_to_ids("<|image_pad|>") == processor.image_token_id


def test_text_model_has_no_processor(tiny_model_dir):
    tokenizer, processor = load_tokenizer_and_processor(model_section(tiny_model_dir))
    assert processor is None and tokenizer.pad_token == "<|pad|>"
