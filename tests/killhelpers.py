"""A fit run in a child process that SIGKILLs itself at its k-th sweep: the tests of stores
that resume (PCG, Newton, ADMM iterates)."""

import signal
import subprocess
import sys
import textwrap

_PATCH = textwrap.dedent("""
    import os as _os, signal as _signal
    import distsketch.engine.sweep as _sw
    _call = _sw.Sweeper.__call__
    _count = [0]
    def _killing(self, it):
        _count[0] += 1
        if _count[0] == {kill_at}:
            _os.kill(_os.getpid(), _signal.SIGKILL)
        return _call(self, it)
    _sw.Sweeper.__call__ = _killing
""")


def run_killed(code: str, *, kill_at: int, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the script ``code`` (it builds its data and fits into a store) in a child process
    whose ``kill_at``-th sweep (a ``distsketch.engine.sweep.Sweeper`` call) SIGKILLs it; asserts the
    child died by that signal and returns the finished process."""
    script = _PATCH.format(kill_at=int(kill_at)) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    return proc
