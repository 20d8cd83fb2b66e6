"""Generate a visual task (``data_source = "shapes"``): one coloured shape per image, "what colour is the shape?".

Each row holds one PNG image (``--image_size`` pixels square, 56 by default) of a circle, square or triangle of
random size and place, filled with one of ``COLOURS`` on a light grey background. The text of every prompt is the
same, so only the image tells the answer: ``reward_model.ground_truth`` is the colour's name. verl's multimodal
schema (as its geo3k example): the prompt's ``<image>`` placeholder takes the row's ``images[0]``, stored as
``{"bytes": <PNG>}``. ``--blank_images`` writes the same rows with every image a plain background (a text-only
control: no model can beat chance on it). Deterministic for a given ``--seed``.

Example: python examples/data_preprocess/shapes.py --local_dir ~/data/shapes --train_size 512 --test_size 128
"""

from __future__ import annotations

import argparse
import io
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

DATA_SOURCE = "shapes"
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 50), "blue": (30, 60, 220), "yellow": (235, 200, 20)}
SHAPES = ("circle", "square", "triangle")
BACKGROUND = (235, 235, 235)
QUESTION = "<image>What colour is the shape? Answer with one word: red, green, blue or yellow."


def draw_shape(shape: str, colour: str, box: tuple[int, int, int, int], image_size: int) -> Image.Image:
    """An RGB ``image_size``² image with ``shape`` filled with ``colour`` inside ``box`` (left, top, right, bottom)."""
    image = Image.new("RGB", (image_size, image_size), BACKGROUND)
    draw, fill = ImageDraw.Draw(image), COLOURS[colour]
    left, top, right, bottom = box
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([((left + right) // 2, top), (right, bottom), (left, bottom)], fill=fill)
    return image


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def make_row(rng: random.Random, split: str, index: int, image_size: int, blank: bool) -> dict:
    colour, shape = rng.choice(sorted(COLOURS)), rng.choice(SHAPES)
    side = rng.randint(image_size // 3, image_size * 3 // 4)
    left, top = rng.randint(0, image_size - side), rng.randint(0, image_size - side)
    box = (left, top, left + side - 1, top + side - 1)
    image = (
        Image.new("RGB", (image_size, image_size), BACKGROUND) if blank else draw_shape(shape, colour, box, image_size)
    )
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": QUESTION}],
        "images": [{"bytes": png_bytes(image)}],
        "ability": "vision",
        "reward_model": {"style": "rule", "ground_truth": colour},
        "extra_info": {"split": split, "index": index, "shape": shape, "box": list(box), "blank": blank},
    }


def generate(train_size: int, test_size: int, image_size: int = 56, seed: int = 42, blank: bool = False) -> dict:
    """``{"train": rows, "test": rows}``; the two splits draw from separate random streams of ``seed``."""
    if image_size < 8:
        raise ValueError(f"--image_size must be at least 8 pixels, got {image_size}")
    sizes = {"train": train_size, "test": test_size}
    return {
        split: [make_row(rng, split, i, image_size, blank) for i in range(size)]
        for split, size in sizes.items()
        for rng in [random.Random(f"{seed}-{split}")]
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", "--local_save_dir", dest="local_dir", default="~/data/shapes")
    parser.add_argument("--train_size", type=int, default=512)
    parser.add_argument("--test_size", type=int, default=128)
    parser.add_argument("--image_size", type=int, default=56)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--blank_images", action="store_true", help="plain images: the text-only control")
    args = parser.parse_args(argv)
    out_dir = os.path.expanduser(args.local_dir)
    os.makedirs(out_dir, exist_ok=True)
    splits = generate(args.train_size, args.test_size, args.image_size, args.seed, args.blank_images)
    for split, rows in splits.items():
        path = os.path.join(out_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
