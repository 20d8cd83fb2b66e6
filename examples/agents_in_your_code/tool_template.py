"""Give the calculator model a chat template that renders an assistant's ``tool_calls`` (for serving it standalone).

    python examples/agents_in_your_code/tool_template.py --model_dir outputs/agents_in_your_code/warm_model \
        --out_dir outputs/agents_in_your_code/warm_model_tools

The tiny model's template (``hybridrl.models.tiny.CHAT_TEMPLATE``) renders each message as
``<|im_start|>{role}\\n{content}<|im_end|>\\n`` and ignores ``tool_calls``. An OpenAI client replays the model's tool
call as a structured ``tool_calls`` entry with empty content, so a server that re-renders the history from text
(``python -m hybridrl.serve``) would show the model an empty assistant turn before the tool's result. Training does
not need this: the training endpoint continues a faithfully replayed conversation from the generated tokens.

``TOOL_CHAT_TEMPLATE`` renders a message without ``tool_calls`` exactly as the tiny template does, and an assistant
message with them as the hermes text the model generated and learned in SFT::

    <|im_start|>assistant\\n<tool_call>{"name": "calculator", "arguments": {"expression": "347*829"}}</tool_call><|im_end|>\\n

``--out_dir`` gets a copy of the model folder with that template (the weights are copied: the model is ~3 MB).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

TOOL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    "{{ '<tool_call>' + {'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson"
    " + '</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def with_tool_template(model_dir: str | Path, out_dir: str | Path) -> Path:
    """Copy ``model_dir`` to ``out_dir`` and set its tokenizer's chat template to ``TOOL_CHAT_TEMPLATE``."""
    from transformers import AutoTokenizer

    src, out = Path(model_dir).expanduser().resolve(), Path(out_dir).expanduser()
    if not (src / "config.json").exists():
        raise FileNotFoundError(f"{src} is not a Hugging Face model folder (run examples/agent_calculator/warm_start.sh)")
    shutil.copytree(src, out, dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--out_dir", required=True)
    args = parser.parse_args(argv)
    print(f"wrote {with_tool_template(args.model_dir, args.out_dir)} (chat template renders tool_calls)")


if __name__ == "__main__":
    main()
