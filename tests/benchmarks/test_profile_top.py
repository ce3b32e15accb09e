"""benchmarks/profile_top.py (docs/performance.md, How to profile): py-spy's raw output read
into shares by thread, by function anywhere on the stack, and by the function running."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_top.py"


def load():
    spec = importlib.util.spec_from_file_location("profile_top", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RAW = [
    'process 7:"python -m pytest";thread (7): MainThread;main (a.py:1);load (b.py:3) 2',
    'process 7:"python -m pytest";thread (8): socialbias-loop;run (c.py:5);check (d.py:9);stem (d.py:20) 5',
    'process 7:"python -m pytest";thread (8): socialbias-loop;run (c.py:6);check (d.py:10) 3',
    "",
]


def test_shares_by_thread_inclusive_and_own(tmp_path, capsys):
    tool = load()
    total, threads, inclusive, own = tool.summarise(RAW)
    assert total == 10
    assert threads == {"MainThread": 2, "socialbias-loop": 8}
    # A function's lines are counted together; a stack counts a function once.
    assert inclusive["check (d.py)"] == 8 and inclusive["run (c.py)"] == 8
    assert own == {"load (b.py)": 2, "stem (d.py)": 5, "check (d.py)": 3}
    raw = tmp_path / "run.txt"
    raw.write_text("\n".join(RAW))
    assert tool.main([str(raw), "--only", "d.py"]) == 0
    out = capsys.readouterr().out
    assert "socialbias-loop 80.0%" in out and " 80.0%  check (d.py)" in out and "run (c.py)" not in out
