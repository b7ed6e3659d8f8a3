"""`python -m tickwheel.dev.stack up|down|status|logs`: the stack commands without the full CLI."""

from __future__ import annotations

import argparse
import logging
import sys

from tickwheel.dev.stack.commands import add_stack_commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tickwheel.dev.stack")
    add_stack_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["stack", *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
