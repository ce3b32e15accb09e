"""The supervisor between pytest and a managed server, so that the server's whole process
tree stops with it (Linux).

``ManagedServer.start`` runs ``python .../reaper.py --grace S -- COMMAND...`` as its
direct child, in a new session and with the parent-death signal set; this process:

- marks itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a descendant whose
  parent dies is reparented to it, not to init, so it stays in the tree and is found;
- runs COMMAND as its child (same output, environment and folder; the parent-death
  signal set on it too, so that a server whose supervisor is killed gets SIGTERM) and
  reaps every descendant that ends while the server runs;
- on SIGTERM, SIGINT or SIGHUP (the parent-death signal is SIGTERM), or when the server's
  main process exits: SIGTERM to every descendant (found through the ``/proc/*/stat``
  parent links, so a process that left the group with ``setsid()`` is still found) and to
  its own process group, up to ``--grace`` seconds for them to end, then SIGKILL to
  whatever is left (a process that ignores SIGTERM included); it exits once its tree is
  empty, with the server's exit status (128 + N for a server ended by signal N; 128 + the
  signal it got if the server could not be reaped). It signals nothing else onward.

When COMMAND cannot be executed it writes ``CANNOT_START`` and the reason as its last
line and exits with ``CANNOT_START_STATUS``. Elsewhere than Linux (no subreaper, no
``/proc``) it replaces itself with COMMAND, which then runs as the direct child exactly as
without it. Only the standard library: ``python reaper.py`` must run on its own.
"""

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
if __name__ == "__main__" and sys.path and os.path.realpath(sys.path[0] or ".") == _HERE:
    # Run by its path, its folder leads sys.path: nothing there is for it (only the
    # standard library is), and nothing there may stand in for a standard module.
    del sys.path[0]

import signal
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: The signals that stop the tree.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: After SIGKILL, at most this long for the tree to be reaped.
KILL_WAIT_S = 5.0
#: Default grace between SIGTERM and SIGKILL (managed.py passes its own STOP_GRACE_S).
DEFAULT_GRACE_S = 15.0
#: Exit status and last log line when the command cannot be executed.
CANNOT_START_STATUS = 127
CANNOT_START = "socialbias-reaper: cannot start"


def supported() -> bool:
    """Whether the tree can be supervised here (Linux: a subreaper and /proc)."""
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self")


def wrap(command: list[str], grace_s: float) -> list[str]:
    """The command line that runs ``command`` under this supervisor (Linux); elsewhere
    ``command`` itself."""
    if not supported():
        return list(command)
    return [sys.executable, os.path.abspath(__file__), "--grace", repr(float(grace_s)), "--", *command]


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """The live pids below ``root`` (children first), from the parent links in /proc
    (a zombie holds nothing, and its children have been reparented already)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(0), ()):
            found.append(child)
            todo.append(child)
    return found


def _signal_tree(signum: int) -> list[int]:
    pids = descendants(os.getpid())
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            pass
    return pids


def _status_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Tree:
    def __init__(self, command: list[str]):
        self.command = command
        self.server: int | None = None
        self.code: int | None = None  # the server's exit status, once reaped

    def start(self) -> None:
        me = os.getpid()
        read_end, write_end = os.pipe()  # close-on-exec: EOF once the command runs
        pid = os.fork()
        if pid == 0:  # the server's process
            try:
                os.close(read_end)
                signal.pthread_sigmask(signal.SIG_SETMASK, ())
                for name in ("SIGPIPE", "SIGXFSZ"):  # as subprocess leaves them for a command
                    if hasattr(signal, name):
                        signal.signal(getattr(signal, name), signal.SIG_DFL)
                _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
                if os.getppid() != me:
                    os._exit(1)
                os.execvp(self.command[0], self.command)
            except OSError as exc:
                os.write(write_end, (exc.strerror or str(exc)).encode(errors="replace"))
            finally:
                os._exit(CANNOT_START_STATUS)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            failure = pipe.read()
        if failure:
            os.waitpid(pid, 0)
            print(f"{CANNOT_START} {self.command[0]}: {failure.decode(errors='replace')}", file=sys.stderr, flush=True)
            sys.exit(CANNOT_START_STATUS)
        self.server = pid

    def reap(self) -> bool:
        """Reap every child that has ended; False when no child is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.server:
                self.code = _status_code(status)

    def wait(self, seconds: float) -> bool:
        """Reap until the tree is empty or ``seconds`` pass; whether it is empty."""
        deadline = time.monotonic() + seconds
        while self.reap():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            signal.sigtimedwait((signal.SIGCHLD,), min(left, 0.2))
        return True

    def stop(self, grace_s: float) -> None:
        """SIGTERM to the tree, ``grace_s`` for it to end, then SIGKILL to what is left."""
        _signal_tree(signal.SIGTERM)
        if os.getpgrp() == os.getpid():  # its own group (it blocks SIGTERM itself)
            try:
                os.killpg(0, signal.SIGTERM)
            except OSError:
                pass
        if self.wait(grace_s):
            return
        deadline = time.monotonic() + KILL_WAIT_S
        noted = False
        while time.monotonic() < deadline:
            left = _signal_tree(signal.SIGKILL)
            if not noted and left:
                print(f"socialbias-reaper: SIGKILL to {len(left)} process(es) of the server's tree still there "
                      f"{grace_s:g} s after SIGTERM: {' '.join(map(str, left))}", file=sys.stderr, flush=True)
                noted = True
            if self.wait(0.2):
                return


def main(argv: list[str]) -> int:
    grace_s = DEFAULT_GRACE_S
    if argv[:1] == ["--grace"]:
        grace_s, argv = float(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: reaper.py [--grace SECONDS] -- COMMAND...", file=sys.stderr)
        return 2
    if not supported():
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"{CANNOT_START} {argv[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            return CANNOT_START_STATUS
    # Every signal it acts on waits in its mask until it asks for it: none is lost
    # between two checks, and none interrupts a step half done.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would reap for it
    signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP_SIGNALS, signal.SIGCHLD))
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    tree = Tree(argv)
    tree.start()
    stopped_by = None
    while tree.code is None:
        info = signal.sigwaitinfo((*STOP_SIGNALS, signal.SIGCHLD))
        if info.si_signo != signal.SIGCHLD:
            stopped_by = info.si_signo
            break
        tree.reap()
    if stopped_by is None and descendants(os.getpid()):
        print(f"socialbias-reaper: the server (pid {tree.server}) exited with status {tree.code}; stopping what it "
              "left running", file=sys.stderr, flush=True)
    tree.stop(grace_s)
    if tree.code is not None:
        return tree.code
    return 128 + (stopped_by or signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
