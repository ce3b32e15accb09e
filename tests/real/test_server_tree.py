"""A managed server's whole process tree stops with it (issue 30, item 8): whatever the
server started, a child that stays in its process group and a grandchild that left it
with setsid() and ignores SIGTERM, is gone within seconds after a normal end of the run,
a SIGTERM or a SIGKILL of pytest, and after the server's main process exits by itself
mid-run. The server is the package's fake OpenAI server, run by a ``server:`` spec's
command template; the runs are pytest in a subprocess, on loopback only. Without the
reaper (models/reaper.py) each case leaves the grandchild, and the SIGKILL and exit
cases the child too."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.models import managed, parse_spec, reaper

from ..support.helpers import suite_yaml

pytestmark = pytest.mark.skipif(not reaper.supported(), reason="the reaper needs Linux (a subreaper and /proc)")

#: The server: writes its pid, starts the child (which starts the grandchild), serves the
#: fake OpenAI API on the port it is given, stops on SIGTERM, and exits with status 3 by
#: itself once the file ``quit`` appears.
FAKE_SERVER = r'''
import os, signal, subprocess, sys, threading
from pathlib import Path

NOTE = """
def note(folder, name):
    (folder / f"{name}.tmp").write_text(str(os.getpid()))
    (folder / f"{name}.tmp").rename(folder / f"{name}.pid")
"""
CHILD = NOTE + """
import os, signal, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
if os.fork() == 0:  # the grandchild: leaves the group, ignores SIGTERM
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    note(folder, "grandchild")
    while True:
        time.sleep(1)
note(folder, "child")  # stays in the group, keeps SIGTERM's default
while True:
    time.sleep(1)
"""
exec(NOTE)

from pytest_socialbias.testing import FakeServer

folder, port, latency = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
note(folder, "server")
(folder / "parent.tmp").write_text(str(os.getppid()))  # the reaper (without it, pytest)
(folder / "parent.tmp").rename(folder / "parent.pid")
subprocess.Popen([sys.executable, "-c", CHILD, str(folder)])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
with FakeServer("No", latency=latency, port=port):
    while not stop.wait(0.05):
        if (folder / "quit").exists():
            os._exit(3)
'''
CONFTEST = "from pytest_socialbias.models import managed\nmanaged.STOP_GRACE_S = 1.0  # fast tests\n"
TREE = ("server", "child", "grandchild")
STARTED = re.compile(r"starting the server server for .* on 127\.0\.0\.1:(\d+)")


def prepare(folder: Path, cases: int, turns: int, latency: float) -> list[str]:
    """The suite, the fake server and a conftest that shortens the grace; pytest's command."""
    (folder / "demo.yaml").write_text(
        suite_yaml([(f"age-{i:03d}", "age", f"Older people are slow, {i}.") for i in range(cases)], turns=turns))
    (folder / "fake_server.py").write_text(FAKE_SERVER)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "pids").mkdir()
    spec = f"server:fake?command={{python}} {folder / 'fake_server.py'} {folder / 'pids'} {{port}} {latency}"
    return [sys.executable, "-m", "pytest", "demo.yaml", "-p", "no:cacheprovider", f"--rootdir={folder}",
            f"--target={spec}", f"--judge={spec}", "--socialbias-record=off", "--socialbias-concurrency=2"]


def env() -> dict:
    out = dict(os.environ)
    out.pop("PYTEST_XDIST_WORKER", None)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie holds nothing: it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def tree_pids(folder: Path) -> dict[str, int]:
    return {name: int((folder / "pids" / f"{name}.pid").read_text()) for name in TREE
            if (folder / "pids" / f"{name}.pid").exists()}


def left_after(pids: dict[str, int], within_s: float = 8.0) -> dict[str, int]:
    """The processes of ``pids`` still alive ``within_s`` seconds on (polled)."""
    deadline = time.monotonic() + within_s
    while True:
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.fixture
def leftovers():
    """Whatever a failed test leaves running is killed (the grandchild ignores SIGTERM)."""
    pids: dict[str, int] = {}
    yield pids
    for pid in pids.values():
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class Run:
    """pytest in a subprocess, its output read as it comes."""

    def __init__(self, folder: Path, args: list[str]):
        self.folder = folder
        self.lines: list[str] = []
        self.answered = threading.Event()
        self.proc = subprocess.Popen(args, cwd=folder, env=env(), text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if "answered after" in line:
                self.answered.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)[-3000:]

    def whole_tree(self, leftovers: dict, timeout_s: float = 30.0) -> dict[str, int]:
        """Once the server answered and its tree is up: the pids of the tree and of the
        server's parent, the reaper (without one, the server is pytest's child)."""
        assert self.answered.wait(timeout_s), self.output
        deadline = time.monotonic() + timeout_s
        while len(tree_pids(self.folder)) < len(TREE) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = tree_pids(self.folder)
        leftovers.update(pids)
        assert len(pids) == len(TREE), (pids, self.output)
        parent = int((self.folder / "pids" / "parent.pid").read_text())
        if parent != self.proc.pid:
            pids["reaper"] = parent
        return pids

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.reader.join(10)
        self.proc.stdout.close()


def test_a_normal_end_stops_the_whole_tree(tmp_path, leftovers):
    run = Run(tmp_path, prepare(tmp_path, cases=1, turns=1, latency=0.0))
    try:
        pids = run.whole_tree(leftovers)
        assert run.proc.wait(60) in (0, 1), run.output
        assert not left_after(pids), f"left after the run ended: {left_after(pids, 0)}"
        assert not list((tmp_path / ".socialbias" / "servers").glob("*.pid"))  # removed at stop
        log = next((tmp_path / ".socialbias" / "servers").glob("*.log")).read_text()
        assert log.splitlines()[0] == f"# {sys.executable} {tmp_path / 'fake_server.py'} {tmp_path / 'pids'} " \
                                      f"{STARTED.findall(''.join(run.lines))[0]} 0.0"  # the server's own command
    finally:
        run.close()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_to_pytest_stops_the_whole_tree(tmp_path, leftovers, how):
    run = Run(tmp_path, prepare(tmp_path, cases=8, turns=3, latency=0.3))  # tens of seconds if left to run
    try:
        pids = run.whole_tree(leftovers)
        assert run.proc.poll() is None, run.output
        run.proc.send_signal(how)
        run.proc.wait(30)
        assert not left_after(pids), f"left after {how.name} of pytest: {left_after(pids, 0)}"
    finally:
        run.close()


def test_a_server_that_exits_by_itself_leaves_nothing_running(tmp_path, leftovers):
    run = Run(tmp_path, prepare(tmp_path, cases=8, turns=3, latency=0.3))
    try:
        pids = run.whole_tree(leftovers)
        (tmp_path / "pids" / "quit").touch()
        assert not left_after(pids), f"left after the server exited: {left_after(pids, 0)}"
        assert run.proc.poll() is None, "the run was over before the server exited: " + run.output
        log = next((tmp_path / ".socialbias" / "servers").glob("*.log")).read_text()
        assert "exited with status 3; stopping what it left running" in log
    finally:
        run.close()


# --------------------------------------------------------------------------- the reaper alone


def reaped(command: list[str], grace_s: float = 1.0, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(reaper.wrap(command, grace_s), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


def test_the_reaper_exits_with_the_servers_status_at_once():
    started = time.monotonic()
    with reaped([sys.executable, "-c", "import sys; print('bye'); sys.exit(3)"]) as proc:
        assert proc.wait(10) == 3 and proc.stdout.read() == "bye\n"
    with reaped([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]) as killed:
        assert killed.wait(10) == 128 + signal.SIGKILL
    assert time.monotonic() - started < 5  # no grace spent when nothing is left


def test_the_reaper_stops_on_sigterm_sigint_and_sighup():
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with reaped([sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(60)"]) as proc:
            assert proc.stdout.readline() == "up\n"
            proc.send_signal(signum)
            # Whatever the signal, the server gets SIGTERM; its status is the reaper's.
            assert proc.wait(10) == 128 + signal.SIGTERM


def test_a_command_that_cannot_start_is_the_same_usage_error(tmp_path, monkeypatch):
    with reaped([str(tmp_path / "no-such-server"), "--port", "1"]) as proc:
        assert proc.wait(10) == reaper.CANNOT_START_STATUS
        assert proc.stdout.read().strip() == f"{reaper.CANNOT_START} {tmp_path / 'no-such-server'}: No such file or directory"
    spec = parse_spec(f"server:m?command={tmp_path / 'no-such-server'} --port {{port}}")
    (plan,) = managed.plans_for(spec, "--target", None)
    server = managed.ManagedServer(plan, tmp_path / "servers" / "s.log")
    # Found missing before anything starts ...
    with pytest.raises(ConfigError, match=r"cannot start the server server for m: .*no-such-server: No such file or "
                                          r"directory; is it installed and on PATH\?"):
        server.start()
    # ... and, should it go missing after that check, the reaper's word becomes the same error.
    monkeypatch.setattr(managed, "_not_executable", lambda name, path: None)
    server.start()
    try:
        with pytest.raises(ConfigError, match=r"cannot start the server server for m: .*no-such-server: No such file "
                                              r"or directory; is it installed and on PATH\?"):
            server.wait_ready(10, lambda text: None)
    finally:
        server.stop()
