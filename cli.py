#!/usr/bin/env python3
"""palkit: one BERT trunk, swappable PAL adapters per task, quantized for phones.

Each package registers its own subcommands; this file only assembles them.
"""
from __future__ import annotations

import argparse
import sys

from bench.commands import register as register_bench
from export.commands import register as register_export
from trainer.commands import register as register_trainer
from trainer.errors import PalkitError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cli.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register_trainer(sub)
    register_export(sub)
    register_bench(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (PalkitError, ValueError, FileNotFoundError) as e:
        # Known failure modes carry a one-line message that says what to do.
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
