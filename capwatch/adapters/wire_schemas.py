"""Regenerate docs/schemas/*.json from the wire models.

    .venv/bin/python -m capwatch.adapters.wire_schemas [DIRECTORY]

tests/adapters/test_wire_schemas.py fails when the committed files differ from what
this writes, so a change to a wire model cannot ship without its published schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from capwatch.adapters.wire import json_schemas

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
    args = sys.argv[1:] if argv is None else argv
    for path in write_schemas(Path(args[0]) if args else DEFAULT_DIRECTORY):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
