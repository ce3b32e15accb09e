"""Managed inference servers: a model spec that names a checkpoint (``vllm:PATH_OR_NAME``)
or a server command (``server:MODEL?command=...``) starts its server once per run, on the
process that aggregates (the xdist controller, or the only process), on a free loopback
port; every role and every worker then talks to it through the OpenAI backend, and it is
stopped at the end of the run.

Lifecycle, so that no server, nor any process it started, outlives its run holding a GPU:

- on Linux the server runs under a small supervisor, ``reaper.py`` (pytest's direct child,
  in a new session, with the parent-death signal set through ``prctl``: if pytest dies,
  even by SIGKILL, the kernel sends the supervisor SIGTERM). The supervisor is a child
  subreaper, so what the server starts (vLLM's engine core, Ray workers) stays in its
  tree even when orphaned or moved to a session of its own; on SIGTERM, SIGINT or SIGHUP,
  or as soon as the server's main process exits, it sends SIGTERM to every process of
  that tree, SIGKILL after ``STOP_GRACE_S`` to what is left, and exits with the server's
  status. Elsewhere the server itself is the direct child, with only its process group
  stopped as below;
- stopped (SIGTERM to the supervisor's process group, which makes it stop the tree; after
  ``STOP_GRACE_S``, plus ``STOP_MARGIN_S`` under the supervisor, SIGKILL to that group)
  when pytest unconfigures: a normal end, an error, Ctrl-C; on SIGTERM the handler
  installed while a server runs stops the servers first, then lets the signal end pytest
  as it would have;
- its output goes to a log file under the cache folder (``servers/``), headed by the
  server's own command, and the process id of pytest's child (the supervisor, whose
  process group holds the server) to ``<log>.pid``; a server that exits or does not
  answer in time is a usage error quoting the log's last lines, and one whose command
  cannot be executed a usage error saying so (with the install hint for vLLM).

If the supervisor itself is killed by SIGKILL (pytest never does that before its own
grace has passed), the server still gets SIGTERM (its own parent-death signal), but nothing
then stops what the server started if the server does not.

Roles whose specs name the same server (same provider, model and server arguments)
share it. The cache key names a checkpoint on disk by a hash of its content (its
``config.json`` and its weights index, or for a single weights file its size and its first
and last MiB), never by its path or port, so a moved checkpoint replays and a changed one
does not.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Callable, overload

from ..errors import ConfigError
from ..runcache import current
from . import reaper

#: How long a server may take to answer /v1/models (loading weights can take minutes).
DEFAULT_START_TIMEOUT_S = 900.0
#: Seconds between progress lines while a server starts.
PROGRESS_EVERY_S = 10.0
#: SIGTERM, then this long, then SIGKILL (the reaper's grace for the server's tree).
STOP_GRACE_S = 15.0
#: How much longer stop() waits for the reaper (Linux: its SIGKILL and reaping of what is
#: left) before it sends SIGKILL to the reaper's process group itself.
STOP_MARGIN_S = reaper.KILL_WAIT_S + 5.0
#: Lines of the log quoted when a server fails.
LOG_TAIL_LINES = 20
#: A managed spec's URL when no server was started for it (a replay or a dry run, which
#: call nothing): any call to it fails at once.
NOT_STARTED_URL = "http://127.0.0.1:9/v1"
#: The weight files whose names and sizes stand for a checkpoint without an index.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
SERVER_LOGS = "servers"

_PR_SET_PDEATHSIG = 1


# --------------------------------------------------------------------------- identity


def checkpoint_identity(model: str) -> str:
    """What names ``model`` in the cache key: ``sha256:...`` of a checkpoint on disk (a
    folder: its config.json and weights index, or the names and sizes of its weight
    files; a file: its size and first and last MiB), else the name as given (a hub name).
    Read once per run (runcache.py): a checkpoint replaced between runs is read again."""
    known = current().checkpoints
    if model not in known:
        known[model] = _checkpoint_identity(model)
    return known[model]


def _checkpoint_identity(model: str) -> str:
    path = Path(model).expanduser()
    digest = hashlib.sha256()
    if path.is_dir():
        for name in ("config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"):
            if (path / name).is_file():
                digest.update(name.encode() + b"\0" + (path / name).read_bytes())
        weights = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
        for weight in weights:
            digest.update(f"{weight.name}\0{weight.stat().st_size}\0".encode())
        return "sha256:" + digest.hexdigest()
    if path.is_file():
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(1 << 20)
            handle.seek(max(0, size - (1 << 20)))
            tail = handle.read(1 << 20)
        digest.update(str(size).encode() + b"\0" + head + b"\0" + tail)
        return "sha256:" + digest.hexdigest()
    return model


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class ServerPlan:
    """One server to start: its key (what specs share it), the command with ``{port}``
    left to fill, and the environment it adds."""

    key: str
    provider: str
    model: str
    command: tuple  # tokens; "{port}" is filled at start
    env: tuple = ()  # (name, value) pairs added to the environment
    worker: str | None = None  # the xdist worker a per-worker server belongs to
    server: str = ""  # server_key of the spec (what names its logs)
    replica: int | None = None  # which of the spec's replicas= servers (from 1), None: the only one

    @property
    def slug(self) -> str:
        base = f"{self.provider}-{hashlib.sha256((self.server or self.key).encode()).hexdigest()[:10]}"
        return base + (f"-{self.worker}" if self.worker else "") + (f"-r{self.replica}" if self.replica else "")


def server_key(spec) -> str:
    """Specs with the same key share one server."""
    return json.dumps([spec.provider, spec.model, sorted(spec.runtime.items())], sort_keys=True, default=str)


def _flag(name: str, value) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    return [flag, value if isinstance(value, str) else json.dumps(value)]


#: What to do when vLLM is not there.
VLLM_HINT = ("install it on the GPU machine (pip install vllm, in this environment), or serve the model yourself "
             "and pass openai:MODEL@http://HOST:PORT/v1")


def vllm_executable() -> str | None:
    """The ``vllm`` command of this Python environment (beside its interpreter, so an
    environment that is not activated still finds its own), else the one on PATH."""
    return shutil.which("vllm", path=str(Path(sys.executable).parent)) or shutil.which("vllm")


def vllm_command(spec) -> list[str]:
    """``vllm serve MODEL --host 127.0.0.1 --port {port}`` plus the spec's server arguments
    as flags (``tensor_parallel_size=2`` -> ``--tensor-parallel-size 2``; ``true`` -> a bare flag).
    ``vllm`` is this environment's own where it has one (``vllm_executable``)."""
    command = [vllm_executable() or "vllm", "serve", spec.model, "--host", "127.0.0.1", "--port", "{port}"]
    for name, value in sorted(spec.runtime.items()):
        if name in ("command", "gpus", "placement", "replicas"):
            continue
        command += _flag(name, value)
    return command


def template_command(spec, option: str) -> list[str]:
    """A ``server:`` spec's ``command=``, split like a shell would, each token's ``{model}``,
    ``{host}`` and ``{python}`` filled (``{port}`` at start)."""
    text = spec.runtime.get("command")
    if not isinstance(text, str) or "{port}" not in text:
        raise ConfigError(
            f"{option}={spec}: a server: spec needs command=... with {{port}} (and usually {{model}}), e.g. "
            "server:/models/m.gguf?command=llama-server -m {model} --host {host} --port {port}"
        )
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{option}={spec}: command=: {exc}") from None
    values = {"model": spec.model, "host": "127.0.0.1", "python": sys.executable, "port": "{port}"}
    try:
        return [token.format(**values) for token in tokens]
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"{option}={spec}: command=: unknown placeholder {exc}; use {{model}}, {{port}}, {{host}} or {{python}}"
        ) from None


#: Where a managed server runs (the spec's ``placement=``): ``shared``, one server on the
#: controller for every worker; ``worker``, one per process that runs cases, each on its
#: own share of the GPUs.
PLACEMENTS = ("shared", "worker")


def placement(spec, option: str = "--target") -> str:
    value = spec.runtime.get("placement", "shared")
    if value not in PLACEMENTS:
        raise ConfigError(f"{option}={spec}: placement={value!r}: expected {' or '.join(PLACEMENTS)}")
    return value


def visible_devices(environ=None) -> list[str] | None:
    """The entries of an inherited CUDA_VISIBLE_DEVICES (ids, UUIDs, MIG ids), or None when
    it is not set (every GPU of the machine is visible, by its index)."""
    environ = os.environ if environ is None else environ
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _is_uuid(entry: str) -> bool:
    return entry.startswith(("GPU-", "MIG-"))


def check_gpus(raw: str, flag: str = "--socialbias-gpus", environ=None) -> str:
    """``--socialbias-gpus`` checked: distinct indices into the visible devices, or UUIDs /
    MIG ids; ConfigError naming the flag and what this process sees."""
    entries = [part.strip() for part in raw.split(",")]
    if not entries or not all(e.isdigit() or _is_uuid(e) for e in entries) or len(set(entries)) != len(entries):
        raise ConfigError(f"{flag}={raw!r}: expected distinct GPU indices (0,1,2,3) or GPU-/MIG- UUIDs, "
                          "separated by commas")
    visible = visible_devices(environ)
    if visible is not None:
        for entry in entries:
            if entry.isdigit() and int(entry) >= len(visible):
                raise ConfigError(
                    f"{flag}={raw}: index {entry} is beyond the {len(visible)} GPU(s) this process can see "
                    f"(CUDA_VISIBLE_DEVICES={','.join(visible)}): indices count within that list, from 0"
                )
            if _is_uuid(entry) and entry not in visible:
                raise ConfigError(f"{flag}={raw}: {entry} is not among the GPUs this process can see "
                                  f"(CUDA_VISIBLE_DEVICES={','.join(visible)})")
    return ",".join(entries)


def physical(gpus: str | None, environ=None) -> str | None:
    """What a started server's CUDA_VISIBLE_DEVICES must hold for ``gpus`` (indices mapped
    through an inherited CUDA_VISIBLE_DEVICES, UUIDs as they are); None: as inherited."""
    if gpus is None:
        return None
    visible = visible_devices(environ)
    return ",".join(visible[int(e)] if e.isdigit() and visible is not None else e for e in gpus.split(","))


@overload
def logical(gpus: str, environ=None) -> list[int]: ...
@overload
def logical(gpus: None, environ=None) -> None: ...


def logical(gpus: str | None, environ=None) -> list[int] | None:
    """The ``cuda:N`` numbers of ``gpus`` inside this process (indices as they are, UUIDs by
    their place in the inherited CUDA_VISIBLE_DEVICES); None when not given."""
    if gpus is None:
        return None
    visible = visible_devices(environ) or []
    return [int(e) if e.isdigit() else visible.index(e) for e in gpus.split(",")]


#: vLLM's own default share of a GPU's memory for one server.
VLLM_MEMORY_SHARE = 0.9


def check_gpu_fit(spec, option: str, gpus: str | None, workers: int) -> None:
    """ConfigError, before any server starts, for a vLLM layout that cannot fit: servers
    that would share a GPU (more workers or replicas than GPUs) while each claims its
    ``gpu_memory_utilization`` (vLLM's default 0.9), or a ``tensor_parallel_size`` larger
    than the GPUs a server gets. Needs the GPU list (``--socialbias-gpus``) to check."""
    if spec.provider != "vllm" or gpus is None:
        return
    ids = gpus.split(",")
    servers = (workers if placement(spec, option) == "worker" and workers > 1 else 1) * replica_count(spec, option)
    share = len(ids) // servers if servers <= len(ids) else 1
    per_gpu = -(-servers // len(ids))  # servers on the busiest GPU
    claimed = float(spec.runtime.get("gpu_memory_utilization", VLLM_MEMORY_SHARE))
    if per_gpu > 1 and per_gpu * claimed > 1.0:
        raise ConfigError(
            f"{option}={spec}: {servers} vLLM servers on {len(ids)} GPU(s) ({gpus}) put {per_gpu} on one GPU, each "
            f"claiming {claimed:.0%} of its memory; give gpu_memory_utilization={0.9 / per_gpu:.2f} (or less), "
            "fewer workers or replicas, or more GPUs"
        )
    parallel = spec.runtime.get("tensor_parallel_size", 1)
    if isinstance(parallel, int) and parallel > share:
        raise ConfigError(
            f"{option}={spec}: tensor_parallel_size={parallel}, but each of the {servers} vLLM server(s) gets "
            f"{share} of the {len(ids)} GPU(s) ({gpus}); lower it, use fewer workers or replicas, or more GPUs"
        )


def gpu_share(gpus: str | None, worker: int, workers: int) -> str | None:
    """Worker ``worker`` of ``workers``' share of ``gpus`` (contiguous, as even as the count
    allows; a worker beyond the GPUs shares round robin); None leaves the GPUs as they are."""
    if gpus is None:
        return None
    ids = gpus.split(",")
    if workers <= 1:
        return gpus
    if workers >= len(ids):
        return ids[worker % len(ids)]
    size = len(ids) // workers
    return ",".join(ids[worker * size:(worker + 1) * size])


def replica_count(spec, option: str = "--target") -> int:
    """How many servers the spec's ``replicas=`` asks for (default 1)."""
    value = spec.runtime.get("replicas", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise ConfigError(f"{option}={spec}: replicas={value!r}: expected a whole number from 1 to 64")
    return value


def _replica_key(key: str, replica: int) -> str:
    return json.dumps([key, "replica", replica])


def plan_for(spec, option: str, gpus: str | None, worker: str | None = None) -> ServerPlan:
    """The server to start for ``spec`` with ``gpus`` visible; ``worker`` (``gw0``) names a
    per-worker server, so each worker's has a key, log and port of its own."""
    placement(spec, option)
    command = vllm_command(spec) if spec.provider == "vllm" else template_command(spec, option)
    env = (("CUDA_VISIBLE_DEVICES", physical(gpus)),) if gpus is not None else ()
    key = server_key(spec) if worker is None else json.dumps([server_key(spec), worker])
    return ServerPlan(key, spec.provider, spec.model, tuple(command), env, worker, server_key(spec))


def plans_for(spec, option: str, gpus: str | None, worker: str | None = None) -> list[ServerPlan]:
    """The servers to start for ``spec``: one, or ``replicas=N`` of them, each on its share
    of ``gpus`` (contiguous, as gpu_share splits them between workers)."""
    count = replica_count(spec, option)
    plan = plan_for(spec, option, gpus, worker)
    if count == 1:
        return [plan]
    plans = []
    for replica in range(1, count + 1):
        share = gpu_share(gpus, replica - 1, count)
        env = (("CUDA_VISIBLE_DEVICES", physical(share)),) if share is not None else ()
        plans.append(dataclasses.replace(plan, key=_replica_key(plan.key, replica), env=env, replica=replica))
    return plans


# --------------------------------------------------------------------------- the registry

def urls() -> dict[str, str]:
    """Server key -> base URL of the run's managed servers, on every process of the run
    (the controller starts the shared ones, and its workers get their URLs through xdist's
    workerinput: plugin.py); the run's own (runcache.py)."""
    return current().servers


def urls_for(spec) -> list[str]:
    """The URLs of ``spec``'s servers (one per replica): this worker's own
    (placement=worker), else the shared ones."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    count = replica_count(spec)
    for key in (json.dumps([server_key(spec), worker or "main"]), server_key(spec)):
        keys = [key] if count == 1 else [_replica_key(key, r) for r in range(1, count + 1)]
        known = urls()
        if all(k in known for k in keys):
            return [known[k] for k in keys]
    return [NOT_STARTED_URL]


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux), even by SIGKILL."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the process group and the stop at unconfigure remain
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _not_executable(name: str, path: str) -> str | None:
    """Why ``name`` cannot be executed as a command (looked up on ``path`` unless it holds a
    ``/``), as exec would say it; None when it can."""
    if shutil.which(name, path=path):
        return None
    if os.sep in name and os.path.isfile(name):
        return os.strerror(errno.EACCES)
    if os.sep not in name and any(os.path.isfile(os.path.join(d, name)) for d in path.split(os.pathsep) if d):
        return os.strerror(errno.EACCES)
    return os.strerror(errno.ENOENT)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in tail) or "    (the log is empty)"


@dataclass
class ManagedServer:
    plan: ServerPlan
    log_path: Path
    port: int = 0
    process: subprocess.Popen | None = None
    started_s: float = 0.0
    ready_s: float | None = None
    shared_by: list = field(default_factory=list)  # the roles that use it

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid_path(self) -> Path:
        return self.log_path.with_suffix(".pid")

    def start(self) -> None:
        self.port = free_port()
        command = [token.replace("{port}", str(self.port)) for token in self.plan.command]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **dict(self.plan.env)}
        missing = _not_executable(command[0], env.get("PATH", os.defpath))
        if missing:  # said here: under the reaper, exec fails in another process
            raise self._cannot_start(command[0], missing)
        parent = os.getpid()
        with open(self.log_path, "w", encoding="utf-8") as log:
            # The header names the server's own command, not the reaper around it.
            log.write("".join(f"# {name}={value}\n" for name, value in self.plan.env) + f"# {shlex.join(command)}\n")
            log.flush()
            try:
                self.process = subprocess.Popen(
                    reaper.wrap(command, STOP_GRACE_S), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env=env,
                    # preexec_fn only calls prctl and getppid (async-signal-safe in effect);
                    # servers start in pytest_configure, before this process starts threads.
                    start_new_session=True, preexec_fn=lambda: _die_with_parent(parent),  # noqa: PLW1509
                )
            except OSError as exc:
                raise self._cannot_start(command[0], exc.strerror or str(exc)) from None
        self.pid_path.write_text(f"{self.process.pid}\n")
        self.started_s = time.monotonic()

    def _cannot_start(self, executable: str, reason: str) -> ConfigError:
        hint = VLLM_HINT if self.plan.provider == "vllm" else "is it installed and on PATH?"
        return ConfigError(f"cannot start the {self.plan.provider} server for {self.plan.model}: {executable}: "
                           f"{reason}; {hint}")

    def wait_ready(self, timeout_s: float, progress) -> None:
        """Poll /v1/models until it answers; ConfigError quoting the log if the server
        exits or ``timeout_s`` passes."""
        from .transport import keep_loopback_off_proxies

        keep_loopback_off_proxies()  # the probe goes to 127.0.0.1, never through a proxy
        next_note = self.started_s + PROGRESS_EVERY_S
        while True:
            process = self.process
            if process is None:  # stopped meanwhile (a SIGTERM to this process)
                raise ConfigError(f"the {self.plan.provider} server for {self.plan.model} was stopped while starting")
            code = process.poll()
            if code == reaper.CANNOT_START_STATUS:
                last = log_tail(self.log_path, 1).strip()
                if last.startswith(reaper.CANNOT_START):
                    executable, _, reason = last[len(reaper.CANNOT_START):].strip().rpartition(": ")
                    raise self._cannot_start(executable, reason)
            if code is not None:
                raise ConfigError(
                    f"the {self.plan.provider} server for {self.plan.model} exited with status {code} before it "
                    f"answered; its log ({self.log_path}) ends:\n{log_tail(self.log_path)}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        self.ready_s = time.monotonic() - self.started_s
                        return
            except OSError:
                pass
            now = time.monotonic()
            if now - self.started_s > timeout_s:
                self.stop()
                raise ConfigError(
                    f"the {self.plan.provider} server for {self.plan.model} did not answer on {self.url} within "
                    f"{timeout_s:.0f} s (--socialbias-server-timeout); its log ({self.log_path}) ends:\n"
                    f"{log_tail(self.log_path)}"
                )
            if now >= next_note:
                progress(f"socialbias: waiting for the {self.plan.provider} server for {self.plan.model} "
                         f"({now - self.started_s:.0f} s; log {self.log_path})")
                next_note = now + PROGRESS_EVERY_S
            time.sleep(0.25)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:  # under the reaper: its own grace, then its SIGKILL of what is left, first
                process.wait(STOP_GRACE_S + (STOP_MARGIN_S if reaper.supported() else 0.0))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(STOP_GRACE_S)
        try:
            self.pid_path.unlink()
        except OSError:
            pass


class ServerPool:
    """The run's managed servers, on the process that starts them."""

    def __init__(self, cache_dir: Path, timeout_s: float = DEFAULT_START_TIMEOUT_S, progress=None):
        self.cache_dir = Path(cache_dir)
        self.timeout_s = timeout_s
        self.progress = progress or (lambda text: print(text, file=sys.stderr, flush=True))
        self.servers: dict[str, ManagedServer] = {}
        self._lock = threading.RLock()
        self._previous_sigterm: Callable[[int, FrameType | None], Any] | int | None = None

    def start(self, plans: dict) -> None:
        """Start every planned server (role -> plan, or a list of plans for a spec's
        replicas; roles with one key share it) and wait until each answers; on failure,
        stop those started and raise ConfigError."""
        try:
            flat = [(role, plan) for role, planned in sorted(plans.items())
                    for plan in (planned if isinstance(planned, list) else [planned])]
            for role, plan in flat:
                server = self.servers.get(plan.key)
                if server is None:
                    server = ManagedServer(plan, self.cache_dir / SERVER_LOGS / f"{plan.slug}.log")
                    self.servers[plan.key] = server
                    self._install_sigterm()
                    server.start()
                    self.progress(f"socialbias: starting the {plan.provider} server for {plan.model} on "
                                  f"127.0.0.1:{server.port} (log {server.log_path})")
                    server.wait_ready(self.timeout_s, self.progress)
                    self.progress(f"socialbias: the {plan.provider} server for {plan.model} answered after "
                                  f"{server.ready_s:.1f} s")
                    urls()[plan.key] = server.url
                server.shared_by.append(role)
        except BaseException:
            self.stop()
            raise

    def _install_sigterm(self) -> None:
        if self._previous_sigterm is not None or threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum, frame):
            self.stop()
            signal.signal(signal.SIGTERM, self._previous_sigterm or signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        self._previous_sigterm = signal.getsignal(signal.SIGTERM) or signal.SIG_DFL
        signal.signal(signal.SIGTERM, on_sigterm)

    def stop(self) -> None:
        with self._lock:
            for server in self.servers.values():
                server.stop()
            known = urls()
            for key in self.servers:
                known.pop(key, None)
            if self._previous_sigterm is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None

    def describe(self) -> list[dict]:
        """What was started, for the summary and the report."""
        return [
            {
                "provider": s.plan.provider, "model": s.plan.model, "roles": sorted(s.shared_by), "url": s.url,
                "worker": s.plan.worker, "replica": s.plan.replica,
                "gpus": dict(s.plan.env).get("CUDA_VISIBLE_DEVICES"), "log": str(s.log_path),
                "ready_s": None if s.ready_s is None else round(s.ready_s, 1),
            }
            for s in self.servers.values()
        ]
