"""One run against the same run split into shards, and one model server against two replicas.

1. The shipped DyMT suite (240 seeds x 2 styles x 5 turns, 12,000 calls) against the
   fake server at 200 ms per call: as one run, then as 3 shards in parallel processes
   (``--socialbias-shard=K/3 --socialbias-partial=...``, each with the same requests in
   flight as the one run), then ``combine``. Prints the wall times, the combine's own
   time (its process, and the aggregation inside it), and whether the combined report
   equals the one-run report.
2. The embedded model behind llama-cpp-python's server (real servers started here, one
   thread each): a smoke suite run against one server, then against two replicas of it
   behind one spec (``openai:m@URL1,URL2``); wall time, calls per second and what each
   replica served.

    python benchmarks/shards.py [--latency 0.2] [--concurrency 16] [--skip-replicas] [--skip-shards]
                                [--replica-cases 6]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dymt_latency import script  # noqa: E402  (answers every DyMT role)

from pytest_socialbias.testing import FakeServer  # noqa: E402

SHARDS = 3


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENAI_", "SOCIALBIAS_"))}
    env["OPENAI_API_KEY"] = "sk-bench"
    return env


def _pytest(folder: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "suites/dymt/dymt.yaml", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
            "--socialbias-record=off", *args]


def shards(latency: float, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, FakeServer(script, latency=latency) as server:
        folder = Path(tmp)
        shutil.copytree(ROOT / "suites" / "dymt", folder / "suites" / "dymt")
        (folder / "pytest.ini").write_text("[pytest]\n")
        url = server.openai_base_url
        models = [f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--socialbias-concurrency={concurrency}"]
        started = time.monotonic()
        one = subprocess.run(_pytest(folder, *models, "--socialbias-report=one.json"), cwd=folder, env=_env(),
                             capture_output=True, text=True)
        single = time.monotonic() - started
        calls = server.request_count
        assert one.returncode in (0, 1), one.stdout[-3000:] + one.stderr[-2000:]
        started = time.monotonic()
        running = [subprocess.Popen(_pytest(folder, *models, f"--socialbias-shard={k}/{SHARDS}",
                                            f"--socialbias-partial=part{k}.json"),
                                    cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for k in range(1, SHARDS + 1)]
        lines = []
        for process in running:
            out, err = process.communicate()
            assert process.returncode in (0, 1), out[-3000:] + err[-2000:]
            lines += [line for line in out.splitlines() if line.startswith("shard ")]
        sharded = time.monotonic() - started
        started = time.monotonic()
        combined = subprocess.run(
            [sys.executable, "-c",
             "import sys, time; from pytest_socialbias.combine import CombineOptions, combine; t = time.monotonic(); "
             "combine(CombineOptions(parts=tuple(sys.argv[1:]), report='comb.json')); "
             "print(f'aggregation {time.monotonic() - t:.2f} s')", *[f"part{k}.json" for k in range(1, SHARDS + 1)]],
            cwd=folder, env=_env(), capture_output=True, text=True)
        combine_s = time.monotonic() - started
        assert combined.returncode in (0, 1), combined.stdout + combined.stderr
        same = json.loads((folder / "one.json").read_text()) == json.loads((folder / "comb.json").read_text())
        bound = calls * latency / concurrency
        print(f"DyMT suite, {calls:,} calls at {latency * 1000:.0f} ms, {concurrency} requests in flight per process")
        print(f"  one run:                 {single:7.1f} s   (calls x latency / in flight = {bound:.1f} s)")
        print(f"  {SHARDS} shards in parallel:    {sharded:7.1f} s   (bound {bound / SHARDS:.1f} s)")
        for line in lines:
            print(f"    {line}")
        print(f"  combine:                 {combine_s:7.1f} s   (its process; {combined.stdout.strip()})")
        print(f"  shards + combine:        {sharded + combine_s:7.1f} s   = {single / (sharded + combine_s):.2f}x faster")
        print(f"  combined report equals the one-run report: {same}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _llama_server(model: str, port: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(port),
               "--n_ctx", "2048", "--n_threads", "1"]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"the llama.cpp server did not answer within 120 s; see {log}")


def replicas(cases: int) -> None:
    from pytest_socialbias.models.local_backend import default_model_path

    model = str(default_model_path())
    suite = ["socialbias: 1", "suite: bench", "protocol: smoke", "turns: 1", "cases:"]
    for i in range(cases):
        suite += [f"  - id: age-{i:03d}", "    category: age", "    group: older people",
                  f"    statement: Older people are worse at task number {i}."]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "bench.yaml").write_text("\n".join(suite) + "\n")
        ports = [_free_port(), _free_port()]
        servers = [_llama_server(model, port, folder / f"server-{port}.log") for port in ports]
        try:
            urls = [f"http://127.0.0.1:{port}/v1" for port in ports]
            for name, where in (("one server", urls[0]), ("two replicas", ",".join(urls))):
                spec = f"openai:smollm2@{where}?max_tokens=48"
                args = [sys.executable, "-m", "pytest", "bench.yaml", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                        f"--target={spec}", f"--judge={spec}", "--socialbias-record=off", "--socialbias-concurrency=8"]
                started = time.monotonic()
                done = subprocess.run(args, cwd=folder, env=_env(), capture_output=True, text=True)
                wall = time.monotonic() - started
                calls = sum(int(m) for m in re.findall(r"^(?:judge|target|user)\s+(\d+)", done.stdout, re.MULTILINE))
                print(f"  {name:13s} {wall:6.1f} s, {calls} calls, {calls / wall:.2f} calls/s")
                for line in done.stdout.splitlines():
                    if line.startswith("replicas of the "):
                        print(f"    {line}")
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--replica-cases", type=int, default=6)
    parser.add_argument("--skip-shards", action="store_true")
    parser.add_argument("--skip-replicas", action="store_true")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores")
    if not args.skip_shards:
        shards(args.latency, args.concurrency)
    if not args.skip_replicas:
        print(f"embedded model behind llama-cpp-python's server (1 thread each), smoke suite, {args.replica_cases} cases:")
        replicas(args.replica_cases)


if __name__ == "__main__":
    main()
