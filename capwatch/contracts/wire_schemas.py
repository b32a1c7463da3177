"""Regenerate docs/schemas/*.json from the wire models.

    .venv/bin/python -m capwatch.contracts.wire_schemas [DIRECTORY]

tests/contracts/test_wire.py fails when the committed files differ from what this writes,
so a change to a wire model cannot ship without its published schema.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from capwatch.contracts.wire import json_schemas

DEFAULT_DIRECTORY = Path("docs/schemas")


def render(schema: dict[str, object]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(directory: Path = DEFAULT_DIRECTORY) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, schema in json_schemas().items():
        path = directory / f"{stem}.json"
        path.write_text(render(schema), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    # argparse rather than argv[1]: "--help" used to become a directory full of schemas.
    parser = argparse.ArgumentParser(
        prog="python -m capwatch.contracts.wire_schemas",
        description="Write the JSON Schemas of the wire events (one file per event type).")
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIRECTORY,
                        help=f"where to write them (default: {DEFAULT_DIRECTORY}, relative to"
                             " the working directory)")
    args = parser.parse_args(argv)
    for path in write_schemas(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
