"""Child processes that die with their parent, even when it is killed with SIGKILL (Linux).

Linux's `PR_SET_PDEATHSIG` sends a process a signal when its parent ends; exactly, when the
*thread* that forked it ends. So a parent starts such children from a thread that lives as long
as the process (its main thread, or a long-lived worker thread). The setting survives `exec`,
so a child started through `tied_to_parent(argv)` (`python -m sparkdispatch.lifeline ...`, this
module as a small launcher) sets it and then becomes `argv`: a JVM behind a shell script too.
A parent that died before the setting took effect is noticed (the launcher is no longer its
child) and the child does not start.

A Python child can call `die_with_parent` itself instead.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> None:
    """This process gets `signum` when its parent (`parent_pid`) ends; exits at once if it has ended already."""
    if sys.platform.startswith("linux"):
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(0)


def tied_to_parent(argv: list[str], signum: int = signal.SIGKILL) -> list[str]:
    """`argv` started through this module: it gets `signum` when the thread starting it ends (see above)."""
    return [sys.executable, "-m", "sparkdispatch.lifeline", str(os.getpid()), str(int(signum)), *argv]


def main(args: list[str]) -> None:
    """`python -m sparkdispatch.lifeline PARENT_PID SIGNAL ARGV...`: become ARGV, tied to the parent."""
    parent_pid, signum, argv = int(args[0]), int(args[1]), args[2:]
    die_with_parent(parent_pid, signum)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
