"""The embedded model on this machine: load time, tokens/s and peak memory.

Compares the two ways a run can use it under pytest-xdist:
  in-process:    each worker loads its own copy, with cores // workers threads (what the
                 plugin does);
  shared server: one llama.cpp OpenAI-compatible server (``python -m llama_cpp.server``,
                 needs ``pip install "llama-cpp-python[server]"``), which the workers call.

    python benchmarks/local_model.py [--tokens 200]

Prints one row per setup: model load time, generation tokens/s per process and in total,
and peak resident memory of the processes that hold a model (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_socialbias.models.local_backend import DEFAULT_N_CTX, default_model_path  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper and a storm."}]

CHILD = r"""
import json, resource, sys, time
import llama_cpp
path, threads, n_ctx, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
start = time.perf_counter()
model = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, verbose=False)
load = time.perf_counter() - start
print("READY", flush=True)
sys.stdin.readline()  # wait so that concurrent children generate at the same time
start = time.perf_counter()
out = model.create_chat_completion(messages=json.loads(sys.argv[5]), max_tokens=tokens, temperature=0.7, seed=1)
gen = time.perf_counter() - start
n = out["usage"]["completion_tokens"]
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"load_s": load, "tokens": n, "gen_s": gen, "rss_mb": rss}), flush=True)
"""


def in_process(workers: int, tokens: int) -> dict:
    threads = max(1, len(os.sched_getaffinity(0)) // workers)
    path = str(default_model_path())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, path, str(threads), str(DEFAULT_N_CTX), str(tokens), json.dumps(PROMPT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for _ in range(workers)
    ]
    for proc in procs:
        assert proc.stdout.readline().strip() == "READY"
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    rows = [json.loads(proc.stdout.readline()) for proc in procs]
    for proc in procs:
        proc.wait()
    return {
        "setup": f"in-process, {workers} worker(s) x {threads} thread(s)",
        "load_s": max(r["load_s"] for r in rows),
        "tok_s_each": sum(r["tokens"] / r["gen_s"] for r in rows) / len(rows),
        "tok_s_total": sum(r["tokens"] for r in rows) / max(r["gen_s"] for r in rows),
        "peak_rss_mb": sum(r["rss_mb"] for r in rows),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _vmhwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def shared_server(workers: int, tokens: int) -> dict | None:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return None
    port = _free_port()
    start = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", str(DEFAULT_N_CTX), "--n_threads", str(len(os.sched_getaffinity(0)))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        ready = time.perf_counter() - start
        body = json.dumps({"messages": PROMPT, "max_tokens": tokens, "temperature": 0.7, "seed": 1}).encode()
        from concurrent.futures import ThreadPoolExecutor

        def one(_):
            t = time.perf_counter()
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            out = json.loads(urllib.request.urlopen(request, timeout=300).read())
            return out["usage"]["completion_tokens"], time.perf_counter() - t

        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            rows = list(pool.map(one, range(workers)))
        wall = time.perf_counter() - t0
        return {
            "setup": f"shared server, {workers} client(s)",
            "load_s": ready,
            "tok_s_each": sum(n / s for n, s in rows) / len(rows),
            "tok_s_total": sum(n for n, _ in rows) / wall,
            "peak_rss_mb": _vmhwm_mb(server.pid),
        }
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    print(f"model {default_model_path().name}, n_ctx {DEFAULT_N_CTX}, {len(os.sched_getaffinity(0))} cores, "
          f"{args.tokens} new tokens per process")
    print(f"{'setup':<40} {'load s':>7} {'tok/s each':>10} {'tok/s total':>11} {'peak RSS MB':>12}")
    rows = [in_process(1, args.tokens), in_process(2, args.tokens)]
    for workers in (1, 2):
        row = shared_server(workers, args.tokens)
        if row is None:
            print("shared server: skipped (pip install 'llama-cpp-python[server]' to measure it)")
            break
        rows.append(row)
    for r in rows:
        print(f"{r['setup']:<40} {r['load_s']:>7.2f} {r['tok_s_each']:>10.1f} {r['tok_s_total']:>11.1f} {r['peak_rss_mb']:>12.0f}")


if __name__ == "__main__":
    main()
