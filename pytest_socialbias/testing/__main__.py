"""Run a :class:`~pytest_socialbias.testing.FakeServer` in the foreground.

Usage::

    python -m pytest_socialbias.testing --port 8765 [--latency 0.1] \\
        [--fault-rate 0.2] [--fault-kinds rate_limit,server_error] [--seed 0] \\
        [--script module:function | --script path/to/file.py:function]

On startup it prints ``OPENAI_BASE_URL=...`` and ``ANTHROPIC_BASE_URL=...``
(one per line, flushed) and then serves until Ctrl-C or SIGTERM.  ``--port 0``
picks a free port.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import Any

from .server import FAULT_KINDS, FakeServer


def load_script(spec: str) -> Any:
    """Import ``module:function`` (the module may be a path to a ``.py`` file)."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--script must look like module:function, got {spec!r}")
    module: ModuleType
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        path = os.path.abspath(module_name)
        name = "_fake_server_script_" + os.path.splitext(os.path.basename(path))[0]
        file_spec = importlib.util.spec_from_file_location(name, path)
        if file_spec is None or file_spec.loader is None:
            raise ImportError(f"cannot import script file {path}")
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = module
        file_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    func = module
    for part in attr.split("."):
        func = getattr(func, part)
    if not callable(func):
        raise TypeError(f"{spec!r} is not callable")
    return func


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_socialbias.testing",
        description="Fake OpenAI/Anthropic server for offline tests.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="probability of a random fault")
    parser.add_argument(
        "--fault-kinds",
        default="rate_limit,server_error",
        help=f"comma-separated fault kinds (from {', '.join(FAULT_KINDS)})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for random faults")
    parser.add_argument("--script", default=None, help="module:function or file.py:function")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = _parse_args(argv)
    script = load_script(args.script) if args.script else None
    kinds = tuple(k.strip() for k in args.fault_kinds.split(",") if k.strip())
    server = FakeServer(
        script=script,
        latency=args.latency,
        fault_rate=args.fault_rate,
        fault_kinds=kinds,
        seed=args.seed,
        host=args.host,
        port=args.port,
    )
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    server.start()
    try:
        print(f"OPENAI_BASE_URL={server.openai_base_url}", flush=True)
        print(f"ANTHROPIC_BASE_URL={server.anthropic_base_url}", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print(f"served {server.request_count} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
