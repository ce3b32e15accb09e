"""GPU probe of the hf: decode loop, without weights or network.

Builds a randomly initialised transformers causal LM shaped like a 0.5B model (Qwen2:
hidden 896, 24 layers, 14 attention heads, 2 KV heads, intermediate 4864, vocabulary
151936, tied embeddings; torch.manual_seed fixed) and drives the decode loop hf: uses,
``HFBackend._decode`` itself (padded batch, KV cache, logits_to_keep, the vectorised
on-device sampling of ``_pick_batch`` with each row's own generator), with token-id
prompts: no checkpoint, no tokenizer, no download. Each row samples with temperature 0.7
and top-p 0.9, seeded per row, and runs its whole budget (no end-of-sequence token).

Per batch size it prints: tokens/s (generated tokens over the batch's wall time, prefill
included, and over the decode steps alone), ms per decode step, the prefill's ms, the
share of decode-step time spent sampling (``_pick_batch``, timed between
torch.cuda.synchronize calls on a GPU so the share is real; plain timers on a CPU), and
the peak memory (torch.cuda.max_memory_allocated on a GPU, reset per batch size; the
peak RSS on a CPU, reset through /proc/self/clear_refs). Then whether the target of
issue 30 is met: sampling under 10% of step time at batch 32 (a GPU's target; on a CPU
the line is informative only).

``--first-step ROWSxTOKENS[,ROWSxTOKENS...]`` measures the memory of the first step (the
prefill, whose logits are the large ones) with logits_to_keep=1 (the backend's way)
against every position kept (logits_to_keep=0, the behaviour before it): on a GPU the
rise of max_memory_allocated over what was allocated before the step; on a CPU the rise
of peak RSS over the RSS before the step, each measured in a fresh subprocess. Beside
each it prints the logits tensor's bytes (rows x kept positions x vocabulary x bytes per
element). With two or more sizes of one prompt length it prints the growth per row and,
with ``--extrapolate ROWS``, the figure for that many rows from it.

Sized to finish in under 5 minutes on one GPU with the defaults:

    python benchmarks/gpu_probe.py [--batches 1,8,32,64] [--prompt 512] [--new 128]
        [--device cuda] [--dtype bfloat16] [--json probe.json]
    python benchmarks/gpu_probe.py --first-step 16x2048            # on a GPU
    python benchmarks/gpu_probe.py --first-step 2x2048,4x2048 --tiny-body --extrapolate 16   # a CPU
    python benchmarks/gpu_probe.py --tiny                         # CPU, seconds (the test's run)

``--tiny`` is a small model (and vocabulary) with short prompts and few steps;
``--tiny-body`` keeps the real vocabulary (151936) on a small body (hidden 64, 2 layers),
so the logits are full size while the prefill stays cheap on a CPU.
Needs the gpu extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Qwen2 shapes: the 0.5B one the probe is about, a small body with the real vocabulary,
#: and a tiny one for CPU tests.
SHAPES = {
    "0.5b": dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864),
    "tiny-body": dict(vocab_size=151936, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=256),
    "tiny": dict(vocab_size=2048, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=256),
}
SEED = 1234
TEMPERATURE, TOP_P = 0.7, 0.9
TARGET_BATCH, TARGET_SHARE = 32, 0.10


class ProbeTokenizer:
    """What the decode loop asks of a tokenizer: a padding id, no end-of-sequence id (every
    row runs its whole budget), and decode (for log-probabilities, never asked here)."""

    pad_token_id = 0
    eos_token_id = None

    def decode(self, ids) -> str:
        return " ".join(str(i) for i in ids)


def build_model(shape: str, device: str, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**SHAPES[shape], tie_word_embeddings=True, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, use_cache=True)
    torch.manual_seed(SEED)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.eval()
    model.generation_config.eos_token_id = None
    return model


def make_backend(model, device: str, max_batch: int):
    from pytest_socialbias.models import parse_spec
    from pytest_socialbias.models.hf_backend import HFBackend

    backend = HFBackend(parse_spec(f"hf:gpu-probe?device={device}&max_batch={max_batch}"), "--gpu-probe")
    backend.use_loaded(ProbeTokenizer(), model, device)
    return backend


class StepTimer:
    """Wraps the backend's ``_pick_batch`` (the sampling of every row): its time, and the
    end of every step (a step ends when its tokens are picked and copied to the host)."""

    def __init__(self, backend, device: str):
        import torch

        self.sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        self.pick = backend._pick_batch
        backend._pick_batch = self  # the instance attribute shadows the method
        self.sampling: list[float] = []
        self.ends: list[float] = []

    def __call__(self, *args):
        self.sync()  # the forward pass's queued work is the forward's, not the sampling's
        start = time.perf_counter()
        out = self.pick(*args)
        self.sync()
        end = time.perf_counter()
        self.sampling.append(end - start)
        self.ends.append(end)
        return out

    def reset(self) -> None:
        self.sampling.clear()
        self.ends.clear()


# ---- memory -------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(match.group(1)) if match else 0


def reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from now
        except OSError:
            pass


def peak_bytes(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    hwm = _status_kb("VmHWM")
    if hwm:
        return hwm * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_bytes(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return int(torch.cuda.memory_allocated())
    return _status_kb("VmRSS") * 1024


# ---- throughput ---------------------------------------------------------------------


def prompts(rows: int, length: int, vocab: int, seed: int) -> list:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(10, vocab, (rows, length), generator=generator).tolist()


def run_batch(backend, timer: StepTimer, device: str, rows: int, prompt: int, new: int, vocab: int) -> dict:
    from pytest_socialbias.models.hf_backend import token_row

    batch = [token_row(p, new, temperature=TEMPERATURE, top_p=TOP_P, seed=SEED + i)
             for i, p in enumerate(prompts(rows, prompt, vocab, SEED + rows))]
    timer.reset()
    reset_peak(device)
    timer.sync()
    start = time.perf_counter()
    backend._decode(batch)  # the backend's own decode loop
    timer.sync()
    wall = time.perf_counter() - start
    peak = peak_bytes(device)
    tokens = sum(len(r.tokens) for r in batch)
    steps = [b - a for a, b in zip([start] + timer.ends, timer.ends)]
    decode_steps, decode_sampling = steps[1:], timer.sampling[1:]  # the first step is the prefill
    decode_time = sum(decode_steps)
    return {
        "batch": rows,
        "tokens": tokens,
        "steps": len(steps),
        "seconds": round(wall, 4),
        "tokens_per_s": round(tokens / wall, 1),
        "decode_tokens_per_s": round(rows * len(decode_steps) / decode_time, 1) if decode_time else None,
        "ms_per_step": round(1000 * statistics.mean(decode_steps), 3) if decode_steps else None,
        "prefill_ms": round(1000 * steps[0], 3),
        "sampling_share": round(sum(decode_sampling) / decode_time, 4) if decode_time else None,
        "sampling_ms_per_step": round(1000 * statistics.mean(decode_sampling), 3) if decode_sampling else None,
        "peak_memory_bytes": peak,
    }


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def table(results: list, device: str) -> list[str]:
    memory = "peak alloc" if device.startswith("cuda") else "peak RSS"
    head = ["batch", "tokens", "tokens/s", "decode tok/s", "ms/step", "prefill ms", "sampling", memory]
    rows = [[str(r["batch"]), str(r["tokens"]), f"{r['tokens_per_s']:.1f}", f"{r['decode_tokens_per_s']:.1f}",
             f"{r['ms_per_step']:.2f}", f"{r['prefill_ms']:.1f}", f"{100 * r['sampling_share']:.1f}%",
             _mib(r["peak_memory_bytes"])] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return lines


def target_line(results: list, device: str) -> tuple[str, dict]:
    found = next((r for r in results if r["batch"] == TARGET_BATCH), None)
    if found is None:
        return f"target (sampling < {TARGET_SHARE:.0%} of step time at batch {TARGET_BATCH}): not measured " \
               f"(batch {TARGET_BATCH} not run)", {"met": None}
    met = found["sampling_share"] < TARGET_SHARE
    where = "" if device.startswith("cuda") else " (measured on a CPU: the target is a GPU's, informative only)"
    return (f"target (sampling < {TARGET_SHARE:.0%} of step time at batch {TARGET_BATCH}): "
            f"{'met' if met else 'NOT met'}, {found['sampling_share']:.1%}{where}",
            {"met": met, "share": found["sampling_share"], "batch": TARGET_BATCH, "limit": TARGET_SHARE})


# ---- first step ---------------------------------------------------------------------


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", part)
        if not match:
            raise SystemExit(f"--first-step {text!r}: expected ROWSxTOKENS[,ROWSxTOKENS...], e.g. 16x2048")
        sizes.append((int(match.group(1)), int(match.group(2))))
    return sizes


def measure_first_step(backend, device: str, rows: int, tokens: int, keep: int, vocab: int) -> dict:
    """The memory the first step takes above what was allocated before it, with
    ``keep`` positions' logits (0: every position)."""
    import torch

    from pytest_socialbias.models.hf_backend import token_row

    batch = [token_row(p, 1, temperature=TEMPERATURE, top_p=TOP_P, seed=SEED + i)
             for i, p in enumerate(prompts(rows, tokens, vocab, SEED))]
    backend.logits_to_keep = keep
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    before = current_bytes(device)
    reset_peak(device)
    backend._decode(batch)  # one step: the prefill, then the first token picked
    peak = peak_bytes(device)
    return {"before_bytes": before, "peak_bytes": peak, "rise_bytes": peak - before}


def first_step(args, model, device: str, dtype: str) -> list:
    import torch

    vocab = model.config.vocab_size
    element = torch.finfo(getattr(torch, dtype)).bits // 8
    out = []
    for rows, tokens in parse_sizes(args.first_step):
        for keep, name in ((1, "logits_to_keep=1 (now)"), (0, "every position (before)")):
            kept = tokens if keep == 0 else keep
            entry = {"rows": rows, "tokens": tokens, "logits_to_keep": keep, "kept_positions": kept,
                     "vocab": vocab, "bytes_per_element": element, "logits_bytes": rows * kept * vocab * element,
                     "what": name}
            if device.startswith("cuda"):
                entry.update(measure_first_step(make_backend(model, device, rows), device, rows, tokens, keep, vocab))
            else:  # a fresh process per measurement: a peak RSS is the process's
                command = [sys.executable, __file__, "--measure-one", f"{rows}x{tokens}", "--keep", str(keep),
                           "--shape", args.shape, "--dtype", dtype, "--device", device]
                done = subprocess.run(command, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"measuring {rows}x{tokens} keep={keep} failed:\n{done.stderr[-2000:]}")
                entry.update(json.loads(done.stdout.strip().splitlines()[-1]))
            out.append(entry)
    return out


def first_step_lines(entries: list, device: str, extrapolate: int | None) -> list[str]:
    what = "max_memory_allocated rise" if device.startswith("cuda") else "peak RSS rise (own process)"
    lines = []
    for e in entries:
        arithmetic = (f"{e['rows']} x {e['kept_positions']} x {e['vocab']} x {e['bytes_per_element']} B = "
                      f"{e['logits_bytes']:,} B ({e['logits_bytes'] / 1e9:.3f} GB)")
        lines.append(f"first step {e['rows']}x{e['tokens']}, {e['what']}: logits {arithmetic}; "
                     f"measured {what}: {e['rise_bytes']:,} B ({e['rise_bytes'] / 1e9:.3f} GB)")
    for keep in (0, 1):
        by_tokens: dict = {}
        for e in entries:
            if e["logits_to_keep"] == keep:
                by_tokens.setdefault(e["tokens"], []).append(e)
        for tokens, found in sorted(by_tokens.items()):
            found.sort(key=lambda e: e["rows"])
            if len(found) < 2:
                continue
            low, high = found[0], found[-1]
            per_row = (high["rise_bytes"] - low["rise_bytes"]) / (high["rows"] - low["rows"])
            name = low["what"]
            lines.append(f"{name}, {tokens} tokens: measured growth {per_row:,.0f} B per row "
                         f"({low['rows']} -> {high['rows']} rows); logits per row "
                         f"{low['kept_positions'] * low['vocab'] * low['bytes_per_element']:,} B")
            if extrapolate:
                estimate = low["rise_bytes"] + (extrapolate - low["rows"]) * per_row
                exact = extrapolate * low["kept_positions"] * low["vocab"] * low["bytes_per_element"]
                lines.append(f"  at {extrapolate}x{tokens}: {estimate:,.0f} B ({estimate / 1e9:.2f} GB) from the "
                             f"measured growth; the logits alone {extrapolate} x {low['kept_positions']} x "
                             f"{low['vocab']} x {low['bytes_per_element']} B = {exact:,} B ({exact / 1e9:.2f} GB)")
    return lines


def measure_one(args) -> int:
    """--measure-one (run by first_step in a fresh process on a CPU): one JSON line."""
    (rows, tokens), = parse_sizes(args.measure_one)
    model = build_model(args.shape, args.device, args.dtype)
    backend = make_backend(model, args.device, rows)
    measure_first_step(backend, args.device, 1, 8, 1, model.config.vocab_size)  # warm-up: thread pools, kernels
    print(json.dumps(measure_first_step(backend, args.device, rows, tokens, args.keep, model.config.vocab_size)))
    return 0


# ---- main ---------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32,64", help="batch sizes, comma separated")
    parser.add_argument("--prompt", type=int, default=None, help="prompt tokens per row (default 512; --tiny 32)")
    parser.add_argument("--new", type=int, default=None, help="new tokens per row (default 128; --tiny 8)")
    parser.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: cuda when available)")
    parser.add_argument("--dtype", default=None, help="bfloat16, float16, float32 (default: bfloat16 on a GPU, "
                        "float32 on a CPU)")
    parser.add_argument("--tiny", action="store_true", help="a small model and vocabulary, short prompts, few steps")
    parser.add_argument("--tiny-body", action="store_true", help="the real vocabulary on a small body")
    parser.add_argument("--first-step", default=None, metavar="ROWSxTOKENS[,...]",
                        help="measure the first step's memory with logits_to_keep=1 and with every position "
                        "(and skip the throughput table)")
    parser.add_argument("--extrapolate", type=int, default=None, metavar="ROWS",
                        help="with --first-step sizes of one prompt length: the figure for ROWS rows")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the figures as JSON")
    parser.add_argument("--measure-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--shape", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.shape = args.shape or ("tiny" if args.tiny else "tiny-body" if args.tiny_body else "0.5b")
    if args.measure_one:
        return measure_one(args)
    prompt = args.prompt or (32 if args.tiny else 512)
    new = args.new or (8 if args.tiny else 128)
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    started = time.perf_counter()
    model = build_model(args.shape, args.device, args.dtype)
    shape = SHAPES[args.shape]
    gpu = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else None
    print(f"gpu probe: random Qwen2 '{args.shape}' (hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, "
          f"{shape['num_attention_heads']}/{shape['num_key_value_heads']} heads, vocab {shape['vocab_size']}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters) on {args.device}"
          f"{f' ({gpu})' if gpu else ''}, {args.dtype}; built in {time.perf_counter() - started:.1f} s")
    report: dict = {"device": args.device, "gpu": gpu, "dtype": args.dtype, "shape": args.shape, "config": shape,
                    "torch": torch.__version__}
    if args.first_step:
        entries = first_step(args, model, args.device, args.dtype)
        for line in first_step_lines(entries, args.device, args.extrapolate):
            print(line)
        report["first_step"] = entries
    else:
        backend = make_backend(model, args.device, max(batches))
        timer = StepTimer(backend, args.device)
        run_batch(backend, timer, args.device, 1, min(prompt, 16), 4, shape["vocab_size"])  # warm-up
        print(f"{prompt} prompt tokens and {new} new tokens per row; temperature {TEMPERATURE}, top-p {TOP_P}, "
              f"a generator per row; the decode loop of hf: (HFBackend._decode)")
        results = []
        for rows in batches:
            results.append(run_batch(backend, timer, args.device, rows, prompt, new, shape["vocab_size"]))
        for line in table(results, args.device):
            print(line)
        line, target = target_line(results, args.device)
        print(line)
        report.update({"prompt": prompt, "new": new, "temperature": TEMPERATURE, "top_p": TOP_P,
                       "results": results, "target": target})
    print(f"total {time.perf_counter() - started:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
