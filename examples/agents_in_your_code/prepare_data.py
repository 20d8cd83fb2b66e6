"""The calculator task's RL data, routed to your agent: ``agent_name = "openai_agent"`` on every row.

    python examples/agents_in_your_code/prepare_data.py --src_dir outputs/agents_in_your_code/data \
        --local_dir outputs/agents_in_your_code/data_openai

Reads ``train.parquet`` / ``test.parquet`` written by ``examples/agent_calculator/prepare_data.py`` (their rows say
``agent_name = "tool_agent"``: hybridrl's own tool loop) and writes the same rows with ``agent_name =
"openai_agent"``, the loop that runs ``custom_rollout_function`` (a row's ``agent_name`` wins over the default loop).
Everything else (``prompt``, ``reward_model.ground_truth``, ``extra_info``) is unchanged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

AGENT_NAME = "openai_agent"
SPLITS = ("train", "test")


def route_to_openai_agent(src_dir: str | Path, local_dir: str | Path) -> Path:
    """Copy ``src_dir/{train,test}.parquet`` to ``local_dir`` with ``agent_name`` set to ``openai_agent``."""
    src, out = Path(src_dir).expanduser(), Path(local_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        path = src / f"{split}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run examples/agent_calculator/prepare_data.py "
                                    f"--local_dir {src} (or warm_start.sh) first")
        table = pq.read_table(path)
        names = pa.array([AGENT_NAME] * table.num_rows, type=pa.string())
        if "agent_name" in table.column_names:
            table = table.set_column(table.column_names.index("agent_name"), "agent_name", names)
        else:
            table = table.append_column("agent_name", names)
        pq.write_table(table, out / f"{split}.parquet")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src_dir", required=True, help="folder with the calculator task's train/test parquet")
    parser.add_argument("--local_dir", required=True)
    args = parser.parse_args(argv)
    print(f"wrote {', '.join(SPLITS)} with agent_name={AGENT_NAME} to {route_to_openai_agent(args.src_dir, args.local_dir)}")


if __name__ == "__main__":
    main()
