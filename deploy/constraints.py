"""Write or check deploy/constraints.txt: the pinned runtime dependency closure the image is built with.

`python deploy/constraints.py` writes the file from the packages installed in this environment (the ones the
tests ran against); `--check` fails when a runtime dependency of tickwheel is missing from the file, so a new
dependency in pyproject.toml cannot reach the image unpinned.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PATH = Path(__file__).with_name("constraints.txt")
HEADER = "# Runtime dependency closure of tickwheel, pinned. Regenerate: .venv/bin/python deploy/constraints.py\n"


def closure(root: str = "tickwheel") -> dict[str, str]:
    """Installed name -> version for every runtime (no extras) dependency reachable from `root`."""
    pinned: dict[str, str] = {}
    todo = [root]
    while todo:
        for raw in distribution(todo.pop()).requires or []:
            req = Requirement(raw)
            name = canonicalize_name(req.name)
            if (req.marker and not req.marker.evaluate({"extra": ""})) or name in pinned:
                continue
            pinned[name] = distribution(name).version
            todo.append(name)
    return pinned


def pinned_names(text: str) -> set[str]:
    lines = (line.split("#")[0].strip() for line in text.splitlines())
    return {canonicalize_name(line.split("==")[0]) for line in lines if line}


def main(argv: list[str]) -> int:
    try:
        pins = closure()
    except PackageNotFoundError as exc:
        print(f"constraints: {exc.name} is not installed; run `make install` first", file=sys.stderr)
        return 1
    if "--check" in argv:
        missing = sorted(set(pins) - pinned_names(PATH.read_text()))
        print(f"constraints: {len(pins)} runtime dependencies, unpinned: {missing or 'none'}")
        return 1 if missing else 0
    PATH.write_text(HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    print(f"constraints: wrote {len(pins)} pins to {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
