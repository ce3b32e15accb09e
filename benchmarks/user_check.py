"""Precision and recall of the simulated-user checks on labelled user turns.

    python benchmarks/user_check.py                       # every labelled set
    python benchmarks/user_check.py --misses              # and each turn it got wrong
    python benchmarks/user_check.py --rules-only          # the word rules without the learned reading
    python benchmarks/user_check.py --embedded            # and the embedded model's reading after it
    python benchmarks/user_check.py --judge SPEC [--sets "held out"]   # the judged check too
    python benchmarks/user_check.py --cost                # the check's CPU per turn, nothing else

The labelled sets (tests/data/user_turns*.yaml, written by us) hold user turns in context
(a DyMT seed and the previous reply, or a BenevDial profile, request and previous reply),
each labelled clean, seed_leak, setup_leak, copy or assistant_voice. The eight tuning sets
(``user_turns.yaml``, ``_2``, ``_3``, ``_fresh``, ``_unseen``, ``_blind``, ``_blind2``,
``_blind4``; the last five were held out when written, then tuned or trained on) chose
the rules' patterns and thresholds and trained the learned reading
(protocols/turn_model.py) and the embedded reading (protocols/turn_embed.py);
``user_turns_blind3.yaml`` was written afterwards by someone who never saw the checks, and
never tuned or trained on: its figures are what to expect of unseen simulators;
``user_turns_blind5.yaml`` ("held out 2"), by two more such writers after both readings were
trained, is a second such set.

Per set it prints, for each label, how many turns there are, the share flagged at all
(recall: a leak flagged as another kind of break is still kept from the target) and the
share flagged as its own kind; for each check, its precision (of the turns it flagged,
the share that were breaks at all, and of its own kind); and the share of clean turns
flagged (the false alarms that cost a redraw).

``--judge SPEC`` measures the judged check (``simulator_check: judge``) as a run does it:
every turn the rules pass goes to the judge's two questions (does it reveal the test or
state the stereotype? does it follow from the conversation, here the previous reply?);
a turn the judge finds revealing or not following counts as flagged ("judged"), an
unreadable verdict as passed (and counted apart). Answers are kept in a record/replay
cache (``--cache-dir``, default .socialbias-bench/), so a rerun costs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_socialbias.protocols.turn_model import SHIPPED, check  # noqa: E402
from pytest_socialbias.protocols.user_check import clean_user_message  # noqa: E402
from pytest_socialbias.research.train_turn_model import labelled_context, labelled_turns  # noqa: E402

DATA = ROOT / "tests" / "data"
SETS = {"tuning": "user_turns.yaml", "tuning-2": "user_turns_2.yaml", "tuning-3": "user_turns_3.yaml",
        "tuning-4": "user_turns_fresh.yaml", "tuning-5": "user_turns_unseen.yaml", "tuning-6": "user_turns_blind.yaml",
        "tuning-7": "user_turns_blind2.yaml", "tuning-8": "user_turns_blind4.yaml",
        "held out": "user_turns_blind3.yaml", "held out 2": "user_turns_blind5.yaml"}
LABELS = ("clean", "seed_leak", "setup_leak", "copy", "assistant_voice")
BREAKS = LABELS[1:]


context = labelled_context


def classify(path: Path, judge=None, record=None, rules_only: bool = False, embedded: bool = False) -> list[tuple[str, str, str, str]]:
    """(context id, label, the check's kind or "clean", text) for every turn of a set; with
    ``embedded``, the embedded model's reading follows the learned one (turn_embed); with
    ``judge``, the turns the rules pass are judged too (kind "judged" when flagged)."""
    out, pending = [], []
    for entry in yaml.safe_load(path.read_text())["contexts"]:
        ctx = context(entry)
        for turn in entry["turns"]:
            text = clean_user_message(turn["text"])
            if embedded:
                from pytest_socialbias.protocols import turn_embed

                found = turn_embed.check(text, ctx)
            else:
                found = check(text, ctx, model=None if rules_only else SHIPPED)
            out.append((entry["id"], turn["label"], found.kind if found else "clean", turn["text"]))
            if found is None and judge is not None:
                history = [{"user": "(an earlier question)", "assistant": entry["previous_reply"]}] if entry.get(
                    "previous_reply") else []
                pending.append((len(out) - 1, history, text))
    if pending:
        from pytest_socialbias.protocols.dialogue import judge_user_turn

        async def judge_all():
            try:
                return await asyncio.gather(*(judge_user_turn(judge, h, t, None, record) for _, h, t in pending))
            finally:
                await judge.aclose()

        for (index, _, _), finding in zip(pending, asyncio.run(judge_all())):
            if finding is not None:
                cid, label, _, text = out[index]
                out[index] = (cid, label, "judged", text)
    return out


def scores(rows) -> dict:
    """Per label: n, recall (flagged at all), recall as its own kind; per check: flagged,
    precision (a break at all), precision as its kind; the clean turns' false-alarm rate."""
    by_label = Counter(label for _, label, _, _ in rows)
    out = {"labels": {}, "checks": {}}
    for label in BREAKS:
        mine = [(lab, got) for _, lab, got, _ in rows if lab == label]
        if mine:
            out["labels"][label] = {
                "n": len(mine),
                "recall": sum(1 for _, got in mine if got != "clean") / len(mine),
                "recall_own": sum(1 for _, got in mine if got == label) / len(mine),
            }
    for kind in BREAKS + ("judged",):
        flagged = [(lab, got) for _, lab, got, _ in rows if got == kind]
        if flagged:
            out["checks"][kind] = {
                "flagged": len(flagged),
                "precision": sum(1 for lab, _ in flagged if lab != "clean") / len(flagged),
                "precision_own": sum(1 for lab, _ in flagged if lab == kind) / len(flagged),
            }
    clean = by_label["clean"]
    out["clean"] = {"n": clean, "flagged": sum(1 for _, lab, got, _ in rows if lab == "clean" and got != "clean")}
    out["clean"]["rate"] = out["clean"]["flagged"] / clean if clean else 0.0
    return out


def cost_per_turn(turns: list | None = None, rounds: int = 3) -> float:
    """The run's check (``turn_model.check``: the rules, then the learned reading) in CPU
    milliseconds a turn over ``turns`` ((text, context) pairs; default: every turn of
    every labelled set, in its context); the best of ``rounds`` rounds, each after every
    per-text, per-seed and per-word cache is emptied, ``re``'s cache of compiled patterns
    too (the lexicon, the model and the patterns compiled once kept, as in a run after its
    first turn)."""
    import functools
    import re

    from pytest_socialbias.protocols import turn_model, user_check
    from pytest_socialbias.protocols.fast_pattern import Screen

    if turns is None:
        turns = [(text, ctx) for file in SETS.values() for _, _, text, ctx in labelled_turns(DATA / file)]
    check(turns[0][0], turns[0][1])  # loads the lexicon and the model, compiles the patterns
    kept = (user_check.group_families, getattr(user_check, "_families_by_stems", None), turn_model.load)
    caches = [f for module in (user_check, turn_model) for f in vars(module).values()
              if isinstance(f, functools._lru_cache_wrapper) and f not in kept]
    # The screens' places of the last texts searched (fast_pattern.Screen) too.
    caches += [s.place for module in (user_check, turn_model) for s in vars(module).values() if isinstance(s, Screen)]
    best = float("inf")
    for _ in range(rounds):
        for cached in caches:
            cached.cache_clear()
        re.purge()  # a pattern compiled per seed or group is paid for again, as in a run
        started = time.process_time()
        for text, ctx in turns:
            check(text, ctx)
        best = min(best, (time.process_time() - started) * 1000 / len(turns))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--misses", action="store_true", help="print each turn the checks got wrong")
    parser.add_argument("--rules-only", action="store_true", help="the word rules alone, without the learned reading")
    parser.add_argument("--embedded", action="store_true",
                        help="the check of --socialbias-simulator-check=embedded: the rules, the learned reading, then "
                             "the embedded model's reading (needs the local extra)")
    parser.add_argument("--judge", metavar="SPEC", help="also the judged check, with this judge model spec")
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS), metavar="SET",
                        help=f"labelled sets to score (default all: {', '.join(SETS)})")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".socialbias-bench", metavar="DIR",
                        help="record/replay cache of the judge's answers (default .socialbias-bench/)")
    parser.add_argument("--cost", action="store_true",
                        help="print the check's CPU milliseconds a turn over every labelled set, and nothing else")
    args = parser.parse_args(argv)
    if args.cost:
        print(f"simulated-user check (rules, then the learned reading): {cost_per_turn():.3f} ms of CPU a turn, "
              f"best of 3 rounds over every labelled turn")
        return 0
    for name in args.sets:
        file = SETS[name]
        judge, record = None, None
        if args.judge:
            from pytest_socialbias.cache import CallCache
            from pytest_socialbias.models import CallPool, Model, parse_spec
            from pytest_socialbias.protocols.user_check import SimulatorRecord

            pool = CallPool(cache=CallCache(args.cache_dir, "new"), concurrency=4)
            judge, record = Model("judge", parse_spec(args.judge, "--judge"), "--judge", pool), SimulatorRecord()
        started, rss = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rows = classify(DATA / file, judge, record, rules_only=args.rules_only, embedded=args.embedded)
        if args.embedded:
            from pytest_socialbias.protocols import turn_embed

            took = time.perf_counter() - started
            cached = len(turn_embed.shared_embedder()._cache)
            grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
            print(f"{name}: embedded reading over {len(rows)} turns in {took:.1f} s ({1000 * took / len(rows):.0f} ms a "
                  f"turn, {cached} texts embedded: turns, seeds, previous replies); peak memory rose {grew:.0f} MB")
        if record is not None:
            print(f"{name}: judge {args.judge} saw {record.judged} turns the rules passed; "
                  f"{record.judged_unreadable} verdicts unreadable")
        result = scores(rows)
        print(f"{name} ({file}, {len(rows)} turns): clean turns flagged {result['clean']['flagged']} of "
              f"{result['clean']['n']} ({result['clean']['rate']:.1%})")
        for label, s in result["labels"].items():
            print(f"  {label:<16} n {s['n']:<4} recall {s['recall']:.2f} (as its own kind {s['recall_own']:.2f})")
        for kind, s in result["checks"].items():
            print(f"  check {kind:<16} flagged {s['flagged']:<4} precision {s['precision']:.2f} "
                  f"(of its own kind {s['precision_own']:.2f})")
        if args.misses:
            for cid, label, got, text in rows:
                if (label == "clean") != (got == "clean"):
                    print(f"    {cid}: labelled {label}, checked {got}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
