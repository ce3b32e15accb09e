"""benchmarks/gpu_probe.py in its --tiny mode, on CPU: a random model driven through the
hf: backend's own decode loop prints a row per batch size with plausible figures, and
the first-step measurement prints the logits arithmetic beside what it measured.
Skipped where torch and transformers are absent (the gpu extra), as in this project's CI."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "benchmarks" / "gpu_probe.py"

pytestmark = [
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")),
                       reason="needs the gpu extra (torch, transformers)"),
    pytest.mark.slow,
]


def probe(*args: str, tmp_path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_tiny_probe_prints_every_batch_size_with_plausible_figures(tmp_path):
    out = probe("--tiny", "--batches", "1,8,32,64", "--json", "probe.json", tmp_path=tmp_path)
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit() and len(cells) >= 9:
            rows[int(cells[0])] = cells
    assert sorted(rows) == [1, 8, 32, 64], out
    for batch, cells in rows.items():
        tokens, per_s, share = int(cells[1]), float(cells[2]), float(cells[6].rstrip("%")) / 100
        assert tokens == batch * 8  # no end-of-sequence: every row runs its 8 new tokens
        assert per_s > 0 and 0 < share < 1 and float(cells[4]) > 0
    assert re.search(r"target \(sampling < 10% of step time at batch 32\): (met|NOT met), [0-9.]+%", out), out
    data = json.loads((tmp_path / "probe.json").read_text())
    assert [r["batch"] for r in data["results"]] == [1, 8, 32, 64]
    assert all(r["tokens_per_s"] > 0 and 0 < r["sampling_share"] < 1 and r["peak_memory_bytes"] > 0
               for r in data["results"])
    assert data["target"]["batch"] == 32 and isinstance(data["target"]["met"], bool)


def test_the_first_step_measurement_states_the_logits_arithmetic(tmp_path):
    out = probe("--tiny", "--first-step", "2x64", "--json", "first.json", tmp_path=tmp_path)
    assert "first step 2x64, logits_to_keep=1 (now): logits 2 x 1 x 2048 x 4 B = 16,384 B" in out, out
    assert "first step 2x64, every position (before): logits 2 x 64 x 2048 x 4 B = 1,048,576 B" in out, out
    entries = json.loads((tmp_path / "first.json").read_text())["first_step"]
    assert [(e["logits_to_keep"], e["logits_bytes"]) for e in entries] == [(1, 16384), (0, 1048576)]
    assert all(e["peak_bytes"] > 0 and e["before_bytes"] > 0 for e in entries)
