"""README's main job on the embedded model, run again and again: does it end measured?

    python benchmarks/embedded_simulator.py                        # seeds 1, 11, ..., 91, this checkout
    python benchmarks/embedded_simulator.py --code /tmp/old        # another checkout, as before
    python benchmarks/embedded_simulator.py --seeds none           # README's command as it is

Each run is README's main job (``pytest suites/smoke.yaml -m "age or gender or race"
--socialbias-allow-partial``: three two-turn smoke dialogues, every role on the embedded
SmolLM2-135M run in-process by llama.cpp) with every role's sampling seed set to one value
(``--target=local?seed=S --judge=local?seed=S --user-model=local?seed=S``; ``none``: no model
option, README's command exactly). A fixed seed's repeated draws use seeds S, S+1, ... (the
client adds the sample index), so the default seeds are 10 apart: no two runs share a
draw. Each run has a fresh cache and a JSON report of its own under
``--out``. A run whose report is already there is read, not run again, so an interrupted
measurement resumes. It prints per run the exit status, the case outcomes and the
simulated user's record (draws, draws the checks refused, turns whose every draw was
refused), then:

* the runs whose cases were all measured (no simulator error; no error of any kind), of
  the runs made, with a Clopper-Pearson 95% interval;
* the simulator's break rate: refused draws of all draws, by kind, with a Clopper-Pearson
  interval over draws (draws of one turn are not independent: read it as indicative) and
  one over runs' user turns (a turn refused at its first draw, of all turns).

No network. A run takes 2-3 minutes on 2 idle cores (far longer on a loaded machine);
``--threads`` sets llama.cpp's threads per run and ``--jobs`` runs that many at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_socialbias.metrics.rates import clopper_pearson  # noqa: E402

DEFAULT_SEEDS = ",".join(str(s) for s in range(1, 101, 10))
MAIN_JOB = ["suites/smoke.yaml", "-m", "age or gender or race", "--socialbias-allow-partial"]


def command(seed: str, folder: Path, threads: int | None) -> list[str]:
    args = [sys.executable, "-m", "pytest", *MAIN_JOB, "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
            f"--socialbias-cache-dir={folder / 'cache'}", f"--socialbias-report={folder / 'report.json'}"]
    if seed != "none":
        args += [f"--{role}=local?seed={seed}" for role in ("target", "judge", "user-model")]
    if threads:
        args.append(f"--socialbias-threads={threads}")
    return args


def run_one(code: Path, seed: str, out: Path, threads: int | None) -> dict:
    folder = out / f"seed-{seed}"
    report = folder / "report.json"
    if not report.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
        start = time.monotonic()
        with open(folder / "output.txt", "w", encoding="utf-8") as log:
            subprocess.run(command(seed, folder, threads), cwd=code, env=env, stdout=log, stderr=subprocess.STDOUT,
                           check=False)
        (folder / "seconds.txt").write_text(f"{time.monotonic() - start:.0f}\n")
    if not report.is_file():
        return {"seed": seed, "missing": True}
    data = json.loads(report.read_text(encoding="utf-8"))
    cases = data["cases"]
    simulator = {"draws": 0, "flagged": Counter(), "failed": 0, "turns": 0, "retried": 0}
    for case in cases:
        record = case.get("simulator") or {}
        simulator["draws"] += record.get("draws", 0)
        simulator["turns"] += record.get("turns", 0)
        simulator["failed"] += record.get("failed", 0)
        simulator["retried"] += record.get("retried", 0)
        simulator["flagged"].update(record.get("flagged") or {})
    kinds = Counter(e["kind"] for case in cases for e in case.get("errors") or [])
    seconds = folder / "seconds.txt"
    return {
        "seed": seed,
        "exit": data["summary"]["exit_status"],
        "outcomes": data["summary"]["outcomes"],
        "error_kinds": dict(kinds),
        "simulator": simulator,
        # Turns refused at their first draw: a turn's first draw is one per turn.
        "first_refused": sum(1 for case in cases for turn in case.get("turns") or [] if turn.get("rejected_user_drafts"))
        + simulator["failed"],
        "seconds": int(seconds.read_text()) if seconds.is_file() else None,
    }


def interval(x: int, n: int) -> str:
    if not n:
        return "-"
    low, high = clopper_pearson(x, n)
    return f"{x}/{n} = {100 * x / n:.0f}% [{100 * low:.0f}, {100 * high:.0f}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout whose plugin runs (default: this one)")
    parser.add_argument("--seeds", default=DEFAULT_SEEDS,
                        help=f"sampling seeds: A-B, a comma list, or none (default {DEFAULT_SEEDS}: 10 apart, so no "
                             "two runs share a draw)")
    parser.add_argument("--out", type=Path, default=Path("embedded-simulator-runs"),
                        help="folder of the runs' caches and reports (a report there is read, not run again)")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads per run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    args = parser.parse_args(argv)
    if "-" in args.seeds:
        first, last = args.seeds.split("-")
        seeds = [str(s) for s in range(int(first), int(last) + 1)]
    else:
        seeds = args.seeds.split(",")
    out = args.out.resolve()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda s: run_one(args.code.resolve(), s, out, args.threads), seeds))
    print(f"README's main job on the embedded model, {args.code}: {len(seeds)} run(s)")
    print(f"{'seed':>5}  exit  outcomes (clean/biased/refused/error)  draws  refused  failed turns  errors  seconds")
    measured = clean = 0
    draws = refused = turns = first = 0
    kinds: Counter = Counter()
    made = 0
    for r in results:
        if r.get("missing"):
            print(f"{r['seed']:>5}  no report (see {out}/seed-{r['seed']}/output.txt)")
            continue
        made += 1
        o, s = r["outcomes"], r["simulator"]
        broke = sum(s["flagged"].values())
        print(f"{r['seed']:>5}  {r['exit']:>4}  {o['clean']}/{o['biased']}/{o['refused']}/{o['error']:<26}  "
              f"{s['draws']:>5}  {broke:>7}  {s['failed']:>12}  {json.dumps(r['error_kinds']):<6}  {r['seconds']}")
        measured += s["failed"] == 0 and "user_simulator_error" not in r["error_kinds"]
        clean += not r["error_kinds"]
        draws, refused, turns = draws + s["draws"], refused + broke, turns + s["turns"]
        first += r["first_refused"]
        kinds.update(s["flagged"])
    print(f"runs with every case measured (no simulator error): {interval(measured, made)}")
    print(f"runs with no error of any kind:                     {interval(clean, made)}")
    print(f"simulator draws refused by the checks:              {interval(refused, draws)}  by kind: "
          + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none"))
    print(f"user turns whose first draw was refused:            {interval(first, turns)}")
    return 0 if made == len(seeds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
