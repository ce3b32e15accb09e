"""Command line: ``python -m pytest_socialbias SUBCOMMAND [options]``.

Each subcommand is one entry of ``SUBCOMMANDS``: a help line, a function that adds its
options to its parser, and a function that runs it with the parsed arguments and returns
the exit status. The modules behind them are imported only when a subcommand is used.
Bad input (an option, a model spec, a missing key, an unreadable file) is one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

from .errors import ConfigError

PROG = "python -m pytest_socialbias"
USAGE_ERROR = 2


@dataclass(frozen=True)
class Subcommand:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]  # adds the subcommand's options
    run: Callable[[argparse.Namespace], int]  # returns the exit status


def _generate_configure(parser: argparse.ArgumentParser) -> None:
    from .benevdial.generate import add_arguments

    add_arguments(parser)


def _generate_run(args: argparse.Namespace) -> int:
    from .benevdial.generate import run

    return run(args)


SUBCOMMANDS: dict[str, Subcommand] = {
    "generate-benevdial": Subcommand(
        help="generate labelled BenevDial dialogues (N, OB, BB) with generator models",
        configure=_generate_configure,
        run=_generate_run,
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (and exit status 2)."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="pytest-socialbias tools beside the pytest plugin.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for name, command in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else USAGE_ERROR
    try:
        return args._run(args)
    except ConfigError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
