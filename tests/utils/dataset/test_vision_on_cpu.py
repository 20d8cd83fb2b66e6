"""vision.py: placeholders → typed content, media counts, image loading errors, mrope ids by hand."""

import io

import pytest
import torch
from PIL import Image

from hybridrl.utils.dataset.vision import (
    check_media_counts,
    count_placeholders,
    load_image,
    mrope_position_ids,
    typed_messages,
)


def _png(colour=(255, 0, 0), size=(8, 8)):
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def test_placeholders_become_typed_parts_in_order():
    messages = [
        {"role": "system", "content": "plain text stays a string"},
        {"role": "user", "content": "<image>first, then<image> and<video>"},
    ]
    typed = typed_messages(messages, ["img0", "img1"], ["vid0"])
    assert typed[0] == messages[0]
    assert typed[1]["content"] == [
        {"type": "image", "image": "img0"},
        {"type": "text", "text": "first, then"},
        {"type": "image", "image": "img1"},
        {"type": "text", "text": " and"},
        {"type": "video", "video": "vid0"},
    ]
    assert messages[1]["content"].startswith("<image>")  # the row's messages are not changed
    assert count_placeholders(messages) == (2, 1)


@pytest.mark.parametrize("num_images, message", [(0, "1 <image> placeholder.* 0 image"), (2, "1 <image>.* 2 image")])
def test_media_counts_must_match(num_images, message):
    with pytest.raises(ValueError, match=f"row 7 of f.parquet: the prompt has {message}"):
        check_media_counts([{"role": "user", "content": "<image>?"}], num_images, 0, "row 7 of f.parquet")


def test_load_image_from_bytes_path_and_pil(tmp_path):
    path = tmp_path / "blue.png"
    path.write_bytes(_png((0, 0, 255)))
    for image in ({"bytes": _png((0, 0, 255))}, {"bytes": None, "path": str(path)}, str(path), path):
        loaded = load_image(image, "row 0")
        assert loaded.mode == "RGB" and loaded.getpixel((0, 0)) == (0, 0, 255)
    assert load_image(Image.new("L", (4, 4), 9), "row 0").mode == "RGB"


def test_unreadable_or_missing_images_name_the_row_and_path(tmp_path):
    with pytest.raises(ValueError, match=r"row 3 of x.parquet: cannot read image \{'bytes': <9 bytes>"):
        load_image({"bytes": b"not a png"}, "row 3 of x.parquet")
    missing = str(tmp_path / "missing.png")
    with pytest.raises(ValueError, match=f"row 4 of x.parquet: cannot read image '{missing}'"):
        load_image(missing, "row 4 of x.parquet")
    with pytest.raises(ValueError, match="row 5 of x.parquet: an image entry has neither bytes nor a path"):
        load_image({"bytes": None, "path": None}, "row 5 of x.parquet")


def test_mrope_ids_by_hand():
    # [pad, t, t, I, I, I, I, t, I, I, t] with I = image token 9; image 1 grid (1, 4, 4) → 2×2 tokens after a 2×2
    # merge, image 2 grid (1, 2, 4) → 1×2 tokens.
    I = 9  # noqa: E741
    input_ids = torch.tensor([0, 1, 2, I, I, I, I, 3, I, I, 4])
    mask = torch.tensor([0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    ids = mrope_position_ids(input_ids, mask, I, torch.tensor([[1, 4, 4], [1, 2, 4]]), spatial_merge_size=2)
    # text at 0, 1; image 1 starts at 2: t = 2, h = 2 + (0,0,1,1), w = 2 + (0,1,0,1); text resumes at 2 + max(2,2) = 4;
    # image 2 starts at 5: h = 5 + (0,0), w = 5 + (0,1); text resumes at 5 + max(1, 2) = 7
    assert ids.tolist() == [
        [0, 0, 1, 2, 2, 2, 2, 4, 5, 5, 7],
        [0, 0, 1, 2, 2, 3, 3, 4, 5, 5, 7],
        [0, 0, 1, 2, 3, 2, 3, 4, 5, 6, 7],
    ]
