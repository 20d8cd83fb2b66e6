"""RLHFDataset with a vision-language processor: the shapes task's rows through each tiny VLM family.

Checks placeholders ↔ vision tokens, ``multi_modal_data`` / ``multi_modal_inputs``, mrope position ids against the
model's own ``get_rope_index``, a padded forward equal to the processor's unpadded one, and malformed rows refused
with the file and row named.
"""

import importlib.util
import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from hybridrl.models.tiny_vlm import FAMILIES
from hybridrl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from hybridrl.utils.tokenizer import hf_processor, hf_tokenizer

SHAPES_SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "data_preprocess", "shapes.py")
QWEN_FAMILIES = [f for f in FAMILIES if f != "idefics3"]
MAX_PROMPT_LENGTH = 64
TOKENS_PER_IMAGE = 4  # a 56×56 image in every tiny family


def _load_shapes():
    spec = importlib.util.spec_from_file_location("preprocess_shapes", SHAPES_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shapes_rows():
    return _load_shapes().generate(train_size=3, test_size=0, seed=0)["train"]


def write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def png(size, colour=(200, 10, 10)):
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def image_row(content, images, index=0):
    return {
        "data_source": "shapes",
        "prompt": [{"role": "user", "content": content}],
        "images": [{"bytes": b} for b in images],
        "reward_model": {"style": "rule", "ground_truth": "red"},
        "extra_info": {"index": index},
    }


def dataset(path, model_dir, **config):
    return RLHFDataset(
        path, hf_tokenizer(model_dir), {"max_prompt_length": MAX_PROMPT_LENGTH, **config}, hf_processor(model_dir)
    )


def load_model(model_dir):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(model_dir).eval()


def model_rope_index(model, item):
    """The model's own mrope ids for the dataset's padded item: ``[3, P]``."""
    input_ids, mask = item["input_ids"][None], item["attention_mask"][None]
    grid = item["multi_modal_inputs"].get("image_grid_thw")
    mm_token_type_ids = (input_ids == model.config.image_token_id).long()
    position_ids, _ = model.model.get_rope_index(input_ids, mm_token_type_ids, grid, None, attention_mask=mask)
    return position_ids[:, 0]


@pytest.mark.parametrize("family", FAMILIES)
def test_shapes_row_through_each_family(tmp_path, tiny_vlm_dir, shapes_rows, family):
    model_dir = tiny_vlm_dir(family)
    ds = dataset(write(tmp_path / "shapes.parquet", shapes_rows), model_dir)
    model = load_model(model_dir)
    item = ds[0]

    image = item["multi_modal_data"]["image"][0]
    assert image.size == (56, 56) and image.mode == "RGB"
    assert int((item["input_ids"] == model.config.image_token_id).sum()) == TOKENS_PER_IMAGE
    assert item["raw_prompt_ids"].count(model.config.image_token_id) == 1  # unexpanded: the rollout engine expands
    inputs = item["multi_modal_inputs"]
    if family == "idefics3":
        assert item["position_ids"].shape == (MAX_PROMPT_LENGTH,)
        assert set(inputs) == {"pixel_values", "pixel_attention_mask"}
        assert inputs["pixel_values"].shape == (1, 1, 3, 56, 56)
    else:
        assert set(inputs) == {"pixel_values", "image_grid_thw"}
        assert inputs["image_grid_thw"].tolist() == [[1, 4, 4]]
        assert item["position_ids"].shape == (3, MAX_PROMPT_LENGTH)
        assert torch.equal(item["position_ids"], model_rope_index(model, item))

    # the padded row gives the same next-token logits as the processor's own unpadded encoding of the prompt
    processor = hf_processor(model_dir)
    direct = processor(text=[item_text(processor, shapes_rows[0])], images=[image], return_tensors="pt")
    position_ids = item["position_ids"][:, None] if item["position_ids"].dim() == 2 else item["position_ids"][None]
    with torch.no_grad():
        padded = model(
            input_ids=item["input_ids"][None],
            attention_mask=item["attention_mask"][None],
            position_ids=position_ids,
            **inputs,
        ).logits[0, -1]
        expected = model(**direct).logits[0, -1]
    torch.testing.assert_close(padded, expected, atol=1e-4, rtol=1e-4)


def item_text(processor, row):
    question = row["prompt"][0]["content"].replace("<image>", "")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


@pytest.mark.parametrize("family", QWEN_FAMILIES)
def test_two_images_of_different_shapes_match_get_rope_index(tmp_path, tiny_vlm_dir, family):
    model_dir = tiny_vlm_dir(family)
    path = write(
        tmp_path / "two.parquet", [image_row("left <image> and right <image>: same?", [png((56, 56)), png((56, 28))])]
    )
    item = dataset(path, model_dir)[0]
    grid = item["multi_modal_inputs"]["image_grid_thw"]
    merge = 2
    expected_tokens = sum(int(t * h * w) // merge**2 for t, h, w in grid.tolist())
    assert grid[1, 1] != grid[1, 2]  # a non-square grid: height and width rows differ
    assert int((item["input_ids"] == load_model(model_dir).config.image_token_id).sum()) == expected_tokens
    assert torch.equal(item["position_ids"], model_rope_index(load_model(model_dir), item))


def test_text_and_image_rows_collate(tmp_path, tiny_vlm_dir):
    rows = [image_row("<image>colour?", [png((56, 56))]), {**image_row("no picture here", []), "images": []}]
    ds = dataset(write(tmp_path / "mixed.parquet", rows), tiny_vlm_dir("qwen2_vl"))
    batch = collate_fn([ds[0], ds[1]])
    assert batch["position_ids"].shape == (2, 3, MAX_PROMPT_LENGTH)
    assert len(batch["multi_modal_data"]) == 2 and batch["multi_modal_data"][1] == {}
    assert batch["multi_modal_inputs"][1] == {}
    text_ids = batch["position_ids"][1]
    assert torch.equal(text_ids[0], text_ids[1]) and torch.equal(text_ids[0], text_ids[2])  # text: 3 equal rows


def test_options_return_multi_modal_inputs_and_processor_kwargs(tmp_path, tiny_vlm_dir):
    path = write(tmp_path / "one.parquet", [image_row("<image>colour?", [png((56, 56))])])
    assert "multi_modal_inputs" not in dataset(path, tiny_vlm_dir("qwen2_vl"), return_multi_modal_inputs=False)[0]
    # the processor kwargs reach the image processor: a 28×28 cap → grid (1, 2, 2) → 1 vision token
    small = {"size": {"shortest_edge": 28 * 28, "longest_edge": 28 * 28}}
    item = dataset(path, tiny_vlm_dir("qwen2_vl"), mm_processor_kwargs=small)[0]
    assert item["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 2, 2]]


def test_overlong_filter_counts_vision_tokens(tmp_path, tiny_vlm_dir):
    model_dir = tiny_vlm_dir("qwen2_vl")
    rows = [image_row("<image>colour?", [png((56, 56))]), {**image_row("colour?", []), "images": []}]
    path = write(tmp_path / "rows.parquet", rows)
    item = dataset(path, model_dir)[0]
    prompt = item["input_ids"][item["attention_mask"].bool()]
    image_length = len(prompt)  # the text row is shorter: 3 tokens (vision start, pad, end) replace the 4 + 2
    kept = dataset(path, model_dir, max_prompt_length=image_length - 1, filter_overlong_prompts=True)
    assert len(kept) == 1 and kept[0]["multi_modal_data"] == {}
    # left truncation that keeps every vision token is allowed; one more token cuts the first vision token
    image_token_id = hf_processor(model_dir).image_token_id
    before_image = int((prompt == image_token_id).nonzero()[0])
    dataset(path, model_dir, max_prompt_length=image_length - before_image, truncation="left")[0]
    with pytest.raises(ValueError, match="would cut its vision tokens"):
        dataset(path, model_dir, max_prompt_length=image_length - before_image - 1, truncation="left")[0]


def test_malformed_rows_are_refused_naming_file_and_row(tmp_path, tiny_vlm_dir):
    model_dir = tiny_vlm_dir("qwen2_vl")
    good = image_row("<image>?", [png((56, 56))])
    missing = write(tmp_path / "missing.parquet", [good, {**image_row("<image>?", []), "images": []}])
    with pytest.raises(
        ValueError,
        match=r"row 1 of .*missing.parquet: the prompt has 1 <image> placeholder\(s\) "
        r"but the row gives 0 image",
    ):
        dataset(missing, model_dir)
    extra = write(tmp_path / "extra.parquet", [image_row("<image> and <image>?", [png((56, 56))])])
    with pytest.raises(ValueError, match=r"row 0 of .*extra.parquet: the prompt has 2 <image>"):
        dataset(extra, model_dir)
    broken = write(tmp_path / "broken.parquet", [good, image_row("<image>?", [b"not an image"])])
    ds = dataset(broken, model_dir)
    with pytest.raises(ValueError, match=r"row 1 of .*broken.parquet: cannot read image"):
        ds[1]
    with pytest.raises(ValueError, match=r"row 0 of .*missing.parquet has images.*no multimodal processor"):
        RLHFDataset(missing, hf_tokenizer(model_dir), {"max_prompt_length": MAX_PROMPT_LENGTH})


def test_image_paths_are_read(tmp_path, tiny_vlm_dir):
    picture = tmp_path / "red.png"
    picture.write_bytes(png((56, 56)))
    row = {**image_row("<image>colour?", []), "images": [str(picture)]}
    item = dataset(write(tmp_path / "paths.parquet", [row]), tiny_vlm_dir("qwen2_vl"))[0]
    assert item["multi_modal_data"]["image"][0].getpixel((0, 0)) == (200, 10, 10)


def test_idefics3_image_splitting_and_two_images(tmp_path, tiny_vlm_dir):
    """Idefics3 with ``data.mm_processor_kwargs`` splitting each image into tiles: every crop (tiles + the global
    view) makes its vision tokens, and the positions stay 1-D (no mrope)."""
    model_dir = tiny_vlm_dir("idefics3")
    row = image_row("left <image> and right <image>?", [png((56, 56)), png((56, 28))])
    path = write(tmp_path / "two.parquet", [row])
    splitting = {"do_image_splitting": True, "size": {"longest_edge": 112}}
    item = dataset(path, model_dir, max_prompt_length=256, mm_processor_kwargs=splitting)[0]
    inputs = item["multi_modal_inputs"]
    crops = inputs["pixel_values"].shape[1]
    assert inputs["pixel_values"].shape == (1, crops, 3, 56, 56) and inputs["pixel_attention_mask"].shape[1] == crops
    assert crops > 2  # tiles besides the two global views
    assert int((item["input_ids"] == load_model(model_dir).config.image_token_id).sum()) == TOKENS_PER_IMAGE * crops
    mask = item["attention_mask"]
    assert torch.equal(item["position_ids"], (mask.cumsum(-1) - 1).clamp(min=0))
