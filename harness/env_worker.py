"""A worker process in another Python environment (`convbench ab`, harness/ab.py).

`convbench ab` measures the same points in two environments (two virtualenvs with different
library versions, the same one with other settings), so each environment's points must run in a
process of that environment's own interpreter: a multiprocessing "spawn" child would not do, as
it takes the parent's sys.path and so imports the parent's libraries. This starts
`PYTHON -m harness.env_worker FD` with one end of a socket pair as FD, and talks to it through a
multiprocessing Connection on that socket (pickled messages, poll with a timeout), as the GPU
worker pool does through its pipe (harness/worker.py):

    child -> ("hello", {"version", "schema", "python", "fingerprint"})
    parent -> ("setup", seed, registry, backend names)  child -> ("backends", {name: why or None})
    parent -> ("measure", points)                        child -> ("rows", [Measurement, ...])
    parent -> None                                       the child exits

Inside the child, points are measured by runner.Measurer exactly as `convbench run` measures
them: CPU points in the process, GPU points in crash-isolated worker processes of the child's own
interpreter, each output checked against the float64 reference. A child that dies while it
measures makes its points `crashed` rows and is started afresh for the next batch.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from harness.measurement import Measurement, Status
from harness.sweep import Point

# Starting a child imports NumPy, pandas and the backends: seconds, not minutes. Beyond this the
# environment is called unusable.
HELLO_TIMEOUT_S = 120.0
# How often the parent looks whether a measuring child still lives.
POLL_S = 1.0


class EnvUnusable(RuntimeError):
    """An environment that cannot measure: not a Python, no convbench, a backend it lacks. The
    message names it (the CLI's one line, exit 2)."""


@dataclass
class EnvWorker:
    """One environment's worker: `label` names it in messages ("--base", "--new"), `python` is
    its interpreter, `variables` extra environment variables for it."""
    label: str
    python: str
    variables: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    registry: Mapping[str, str] = field(default_factory=dict)
    backends: Sequence[str] = ()
    info: dict[str, Any] = field(default_factory=dict)    # the child's hello
    _process: subprocess.Popen | None = None
    _connection: Connection | None = None

    def start(self) -> dict[str, Any]:
        """Start the child and check that it can measure; its hello (version, fingerprint)."""
        ours, theirs = socket.socketpair()
        try:
            self._process = subprocess.Popen(
                [self.python, "-m", "harness.env_worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env={**os.environ, **self.variables},
                cwd=tempfile.gettempdir())   # not a checkout: the ENV's own convbench runs
        except OSError as err:
            raise EnvUnusable(f"{self.label} {self.python}: cannot be started: "
                                    f"{err.strerror or err}") from None
        finally:
            theirs.close()
        self._connection = Connection(ours.detach())
        kind, self.info = self._receive(HELLO_TIMEOUT_S, "start")
        self._connection.send(("setup", self.seed, dict(self.registry), list(self.backends)))
        kind, missing = self._receive(HELLO_TIMEOUT_S, "load its backends")
        lacking = {name: why for name, why in missing.items() if why}
        if lacking:
            name, why = next(iter(lacking.items()))
            self.close()
            raise EnvUnusable(f"{self.label} {self.python}: cannot run backend {name!r}: "
                                    f"{why}")
        return self.info

    def measure(self, points: list[Point]) -> list[Measurement]:
        """The rows of `points` measured in this environment; `crashed` rows (and a fresh
        child next time) when the child dies meanwhile."""
        if self._process is None or self._process.poll() is not None:
            self.start()
        try:
            self._connection.send(("measure", points))
            while not self._connection.poll(POLL_S):
                if self._process.poll() is not None:
                    raise EOFError
            kind, rows = self._connection.recv()
            return rows
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._process.wait(timeout=30)
            self._forget()
            return [Measurement(p, Status.CRASHED, f"the {self.label} environment's worker "
                                                   f"died (exit code {code})") for p in points]

    def close(self) -> None:
        if self._process is None:
            return
        try:
            self._connection.send(None)
            self._process.wait(timeout=30)
        except (OSError, BrokenPipeError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait(timeout=10)
        self._forget()

    def _forget(self) -> None:
        if self._connection is not None:
            self._connection.close()
        if self._process is not None and self._process.stderr is not None:
            self._process.stderr.close()
        self._process = self._connection = None

    def _receive(self, timeout_s: float, doing: str) -> tuple[str, Any]:
        """The child's next message, or EnvUnusable with the last line it wrote to stderr
        (an ImportError: no convbench there) when it ends or says nothing in time."""
        closed = False
        try:
            if self._connection.poll(timeout_s):
                return self._connection.recv()
        except (EOFError, OSError):
            closed = True       # the child is ending: wait for its exit code, not a timeout
        ended = _exit_code(self._process, CLOSED_WAIT_S if closed else 0.0)
        self._process.kill()
        self._process.wait(timeout=10)
        said = self._process.stderr.read().decode(errors="replace").strip().splitlines()
        last = (said[-1] if said else f"no answer within {timeout_s:.0f} s" if ended is None
                else f"it ended (exit code {ended}) without a word: is it a Python?")
        self._forget()
        if "No module named 'harness'" in last or "No module named harness" in last:
            last = "convbench is not installed there (pip install convbench in it)"
        raise EnvUnusable(f"{self.label} {self.python}: cannot {doing}: {last}")


def _hello() -> dict[str, Any]:
    import harness
    from harness import env
    from harness.schema import SCHEMA_VERSION
    return {"version": harness.__version__, "schema": SCHEMA_VERSION, "python": sys.executable,
            "fingerprint": env.fingerprint()}


def _unavailable(names: Sequence[str]) -> dict[str, str | None]:
    """backend name -> why it cannot run here (None: it can)."""
    from harness import backends
    why: dict[str, str | None] = {}
    for name in names:
        try:
            why[name] = backends.get(name).unavailable_reason()
        except Exception as err:     # an unknown name, or an import that failed on the way
            why[name] = " ".join(str(err).split()) or type(err).__name__
    return why


def serve(fd: int) -> None:
    """The child's side of the protocol (module docstring), on the socket `fd`."""
    connection = Connection(fd)
    from harness import backends, runner
    connection.send(("hello", _hello()))
    _, seed, registry, names = connection.recv()
    backends.register_all(registry)
    connection.send(("backends", _unavailable(names)))
    measurer = runner.Measurer(seed)
    try:
        while (message := connection.recv()) is not None:
            rows: list[Measurement] = []
            measurer.run(message[1], rows.append)
            connection.send(("rows", rows))
    finally:
        measurer.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]))


# A child that closed its end has ended or is about to: how long its exit code may take.
CLOSED_WAIT_S = 5.0


def _exit_code(process: subprocess.Popen, wait_s: float) -> int | None:
    """The process's exit code, waiting up to `wait_s` for it; None while it still runs."""
    try:
        return process.wait(timeout=wait_s) if wait_s > 0 else process.poll()
    except subprocess.TimeoutExpired:
        return None
