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
from pathlib import Path
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
    from .research.generate import add_arguments

    add_arguments(parser)


def _generate_run(args: argparse.Namespace) -> int:
    from .research.generate import run

    return run(args)


def _cache_configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    verify = actions.add_parser(
        "verify",
        help="check the record/replay cache: sqlite integrity, the calls table, and that every "
        "row's request and response parse and its key is the hash of its request",
        description="Check the record/replay cache without changing it. Exit status 0 when "
        "every entry is sound, 1 with one line per problem, 2 when there is no cache to check. "
        "With --repair, a damaged cache (a truncated or corrupted file) is replaced by a new one "
        "holding every entry that still reads back sound; the damaged file is kept beside it.",
    )
    verify.add_argument(
        "--cache-dir", type=Path, default=Path(".socialbias"), metavar="DIR", dest="cache_dir",
        help="record/replay cache folder (default .socialbias)",
    )
    merge = actions.add_parser(
        "merge",
        help="merge the caches of a sharded run into one, for a replay of the whole run",
        description="Merge record/replay cache folders into a new one. Every key is kept once; where two caches "
        "answered one request differently, the readable answer is kept, then the one recorded last, then the one "
        "of the folder named first, and each conflict is printed. The inputs are only read.",
    )
    merge.add_argument("inputs", nargs="+", type=Path, metavar="DIR", help="cache folders to merge")
    merge.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="new cache folder to write")
    verify.add_argument(
        "--repair", action="store_true",
        help="salvage what is readable of a damaged cache into a new file (no run may use the cache meanwhile); "
        "exit status 0 once the new file is in place",
    )


def _cache_merge(args: argparse.Namespace) -> int:
    from .cachecheck import merge_caches

    merged = merge_caches(args.inputs, args.output)
    for folder, count in merged.taken.items():
        print(f"{folder}: {count} entries taken")
    for key, role, model, kept, others in merged.conflicts[:20]:
        print(f"conflict: {role} call to {model} (key {key[:12]}) answered differently in {', '.join(others)}; "
              f"kept the answer of {kept}")
    if len(merged.conflicts) > 20:
        print(f"... and {len(merged.conflicts) - 20} more conflict(s)")
    print(f"{merged.written} entries and {merged.adaptations} endpoint adaptation(s) written to {args.output}; "
          f"{len(merged.conflicts)} conflict(s)")
    return 0


def _cache_run(args: argparse.Namespace) -> int:
    from .cache import CACHE_FILE
    from .cachecheck import repair_cache, verify_cache

    if args.action == "merge":
        return _cache_merge(args)

    if args.repair:
        repair = repair_cache(args.cache_dir)
        if not repair.needed:
            print(f"nothing to repair: {repair.salvaged} entries OK")
            return 0
        lost = (f"{repair.unreadable} row(s) could not be read" if repair.unreadable is not None
                else "the rest could not be read (how many rows is unknown: the end of the table is lost)")
        print(
            f"salvaged {repair.salvaged} entries into a new {args.cache_dir / CACHE_FILE}; {lost}; "
            f"{repair.unsound} read but were unsound; the next run asks their calls again"
        )
        print(f"the damaged file is kept as {repair.damaged_copy}; delete it when you no longer need it")
        return 0
    rows, problems = verify_cache(args.cache_dir)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) in {args.cache_dir}; `python -m pytest_socialbias cache verify --repair "
              f"--cache-dir {args.cache_dir}` salvages what is readable into a new file", file=sys.stderr)
        return 1
    print(f"{rows} entries OK")
    return 0


def _combine_configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("parts", nargs="+", type=Path, metavar="PART",
                        help="the partial file of every shard (written by --socialbias-partial), in any order")
    parser.add_argument("--report", "--socialbias-report", type=Path, metavar="PATH", dest="report",
                        help="write the run's JSON report here (the same file a single run writes)")
    parser.add_argument("--html", "--socialbias-html", type=Path, metavar="PATH", dest="html",
                        help="write the run's HTML report here")
    parser.add_argument("--junit", "--junitxml", type=Path, metavar="PATH", dest="junit",
                        help="write a JUnit XML file with one test case per gate (failed, passed or skipped)")
    parser.add_argument("--baseline", "--socialbias-baseline", metavar="PATH|none", dest="baseline",
                        help="JSON report of the last accepted release to compare with, or `none` when there is none yet")
    parser.add_argument("--thresholds", "--socialbias-thresholds", type=Path, metavar="PATH", dest="thresholds",
                        help="the gates file (default: thresholds.yaml in the working directory, if there)")
    parser.add_argument("--gates-for", "--socialbias-gates-for", choices=("all", "present"), default="all",
                        dest="gates_for", help="as --socialbias-gates-for: present skips gates of suites this project lacks")


def _combine_run(args: argparse.Namespace) -> int:
    from .combine import CombineOptions, combine
    from .report.terminal import summary_block

    result, unwritten, parts = combine(CombineOptions(
        parts=tuple(args.parts), report=args.report, html=args.html, junit=args.junit, baseline=args.baseline,
        thresholds=args.thresholds, gates_for=args.gates_for,
    ))
    total = parts[0][1]["shard"]["total"]
    print(f"combined {len(parts)} of {total} shard(s): {len(result.records)} case(s)")
    for line, _ in summary_block(result, unwritten):
        print(line)
    if args.junit is not None and not any(p.startswith("--junit") for p in unwritten):
        print(f"JUnit XML: {args.junit}")
    return result.exit_status


def _init_configure(parser: argparse.ArgumentParser) -> None:
    from .starter import add_arguments

    add_arguments(parser)


def _init_run(args: argparse.Namespace) -> int:
    from .starter import run

    return run(args)


def _remove_configure(parser: argparse.ArgumentParser) -> None:
    from .starter import add_remove_arguments

    add_remove_arguments(parser)


def _remove_run(args: argparse.Namespace) -> int:
    from .starter import run_remove

    return run_remove(args)


def _pr_data_configure(parser: argparse.ArgumentParser) -> None:
    from .prdata import add_arguments

    add_arguments(parser)


def _pr_data_run(args: argparse.Namespace) -> int:
    from .prdata import run

    return run(args)


def _agreement_configure(parser: argparse.ArgumentParser) -> None:
    from .research.agreement import add_arguments

    add_arguments(parser)


def _agreement_run(args: argparse.Namespace) -> int:
    from .research.agreement import run

    return run(args)


def _markers_configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="dialogue JSONL file (docs/dialogues-format.md); class optional")
    parser.add_argument("--json", type=Path, metavar="PATH", dest="json_path", help="also write the table as JSON to PATH")
    parser.add_argument(
        "--by", metavar="FIELD", help="also one table per value of this record field (e.g. generator, role, user.age)"
    )


def _markers_run(args: argparse.Namespace) -> int:
    from .research.marker_report import markers_report

    print(markers_report(args.file, by=args.by, json_path=args.json_path))
    return 0


def _quality_configure(parser: argparse.ArgumentParser) -> None:
    from .research.quality import add_arguments

    add_arguments(parser)


def _quality_run(args: argparse.Namespace) -> int:
    from .research.quality import run

    return run(args)


def _table_configure(parser: argparse.ArgumentParser) -> None:
    from .tables import add_arguments

    add_arguments(parser)


def _table_run(args: argparse.Namespace) -> int:
    from .tables import run

    return run(args)


def _sample_configure(parser: argparse.ArgumentParser) -> None:
    from .research.lexicon import add_sample_arguments

    add_sample_arguments(parser)


def _sample_run(args: argparse.Namespace) -> int:
    from .research.lexicon import run_sample

    return run_sample(args)


def _cues_configure(parser: argparse.ArgumentParser) -> None:
    from .research.lexicon import add_cue_arguments

    add_cue_arguments(parser)


def _cues_run(args: argparse.Namespace) -> int:
    from .research.lexicon import run_cue_words

    return run_cue_words(args)


SUBCOMMANDS: dict[str, Subcommand] = {
    "init": Subcommand(
        help="write a starter project: the starter suites (smoke and DyMT; --suite NAME ... or --all for others), "
        "a thresholds.yaml with only their gates, pytest.ini, the CI pipelines with this version pinned, a README "
        "stub; it prints what one record of the suites costs (calls and tokens)",
        configure=_init_configure,
        run=_init_run,
    ),
    "remove": Subcommand(
        help="remove a suite from a project: its suite file, the files only it reads, its snapshots, and its "
        "gates in thresholds.yaml (the rest of the file kept as written)",
        configure=_remove_configure,
        run=_remove_run,
    ),
    "generate-benevdial": Subcommand(
        help="generate labelled BenevDial dialogues (N, OB, BB) with generator models",
        configure=_generate_configure,
        run=_generate_run,
    ),
    "combine": Subcommand(
        help="combine the partial files of a sharded run (--socialbias-shard, --socialbias-partial) into the "
        "run's report, comparison and gates, with the exit status a single run would have",
        configure=_combine_configure,
        run=_combine_run,
    ),
    "cache": Subcommand(
        help="tools for the record/replay cache (verify, merge)",
        configure=_cache_configure,
        run=_cache_run,
    ),
    "pr-data": Subcommand(
        help="for the CI record job of pull requests: replace the checkout's suites and gates by a pull "
        "request's, data files only (no code, no links), and take its plain model specs and plugin pin",
        configure=_pr_data_configure,
        run=_pr_data_run,
    ),
    "agreement": Subcommand(
        help="agreement among raters of labelled items (two: Cohen's kappa and Gwet's AC1; more: Fleiss' kappa "
        "and Gwet's AC1), with intervals, and a share of items with a field true",
        configure=_agreement_configure,
        run=_agreement_run,
    ),
    "markers": Subcommand(
        help="surface markers of patronising talk in a dialogue file, no judge or guard: means per "
        "class, Cohen's d against N with its confidence interval",
        configure=_markers_configure,
        run=_markers_run,
    ),
    "table": Subcommand(
        help="the papers' tables across runs from JSON reports: DyMT (a row per target: zero-shot, scripted and "
        "DyMT bias, coherence, refusal, the rise from turn 5 to 10 per category) or BenevDial detection (a row per "
        "detector), each cell with its interval and n, notes on partial, failed or mismatched runs, rows compared "
        "pairwise with the paired tests of the no_regression gates",
        configure=_table_configure,
        run=_table_run,
    ),
    "quality": Subcommand(
        help="dataset quality of a labelled dialogue file: MTLD, Self-BLEU-4 and Vendi (n-gram kernel), "
        "per class and per generator x class",
        configure=_quality_configure,
        run=_quality_run,
    ),
    "annotation-sample": Subcommand(
        help="a class-balanced, seeded sample of a labelled dialogue file for people to annotate (100 per "
        "class: 300), with a blind copy for the annotator",
        configure=_sample_configure,
        run=_sample_run,
    ),
    "cue-words": Subcommand(
        help="cue words per class from a labelled dialogue file (agent turns; weighted log-odds with an "
        "informative Dirichlet prior): a cue file for the detector suites' mask variants",
        configure=_cues_configure,
        run=_cues_run,
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
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"{PROG} {command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
