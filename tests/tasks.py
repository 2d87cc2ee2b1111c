"""Task functions for executor tests: importable by name, so spawn and forkserver work."""

from __future__ import annotations

import os
import signal
import time


def echo(x):
    return x


def pad(key, arg: bytes, size: int) -> tuple:
    """Return the key, a digest of the argument and ``size`` bytes derived from the key."""
    return key, len(arg), arg[:8], (str(key).encode() * (size // max(1, len(str(key))) + 1))[:size]


def record(log: str, key, sleep: float = 0.0, result=None):
    """Append one line to ``log`` (O_APPEND: atomic per line) so tests count real runs."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)
    if sleep:
        time.sleep(sleep)
    return key if result is None else result


def wait_for(path: str, key=None, arg: bytes = b"", limit: float = 60.0):
    """Block until ``path`` exists (a test's release switch); bounded so nothing hangs."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)
    return key, len(arg)


def raise_value_error(msg: str):
    raise ValueError(msg)


class CustomError(Exception):
    def __init__(self, msg: str, code: int) -> None:
        super().__init__(msg, code)
        self.code = code


def raise_custom(code: int):
    raise CustomError("custom", code)


def exit_process(code: int):
    os._exit(code)


def kill_self(sig: int = signal.SIGKILL):
    os.kill(os.getpid(), sig)
    time.sleep(10)


def sleep(seconds: float, result=None):
    time.sleep(seconds)
    return result


def pid_of_worker(_=None) -> int:
    return os.getpid()


def fail_init():
    raise RuntimeError("initializer says no")


_initialized = {}


def set_flag(value) -> None:
    _initialized["flag"] = value


def get_flag():
    return _initialized.get("flag")


class Unpicklable:
    def __reduce__(self):
        raise TypeError("this object refuses to be pickled")


def return_unpicklable():
    return Unpicklable()


def _rebuild_fails():
    raise RuntimeError("refuses to be unpickled")


class UnpicklableInParent:
    def __reduce__(self):
        return (_rebuild_fails, ())


def return_unpicklable_in_parent():
    return UnpicklableInParent()


class BadException(Exception):
    """Pickles fine in the worker, fails to unpickle in the parent (wrong init args)."""

    def __init__(self, a, b):
        super().__init__(a)
        self.b = b


def raise_bad_exception():
    raise BadException("x", "y")


def exit_via_sys(code: int):
    import sys

    sys.exit(code)


class CustomBaseException(BaseException):
    pass


def raise_base_exception():
    raise CustomBaseException("not an Exception")


# -- hardening (tests/worker/test_faults.py, tests/contract/test_stress.py, ...) --


def segfault():
    """A real segmentation fault: read address 0 (not a SIGSEGV sent by kill)."""
    import ctypes

    ctypes.string_at(0)


def raise_keyboard_interrupt():
    raise KeyboardInterrupt("inside the task")


def record_pid(log: str, key, sleep: float = 0.0) -> int:
    """Append ``key pid`` to ``log`` (one line per real run) and return the pid."""
    line = f"{key} {os.getpid()}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    if sleep:
        time.sleep(sleep)
    return os.getpid()


def record_pid_until(log: str, key, gate: str, limit: float = 60.0) -> int:
    """``record_pid``, then wait until ``gate`` exists (``limit`` s at most, then fail):
    a task that is surely still running when the test kills its worker."""
    record_pid(log, key)
    wait_for(gate, limit=limit)
    return os.getpid()


def record_big(log: str, key, size: int) -> bytes:
    """Record the run, then return ``size`` bytes (a result that fills many pipes)."""
    record(log, key)
    return bytes(range(256)) * (size // 256) + b"\0" * (size % 256)


def _serve_local(name: str):
    """A local of ``pipepool.worker.serve``, which is on the stack of every task: how a
    test reaches the running worker's result fd and task id without a hook in the
    library. A rename of that function or its locals fails here, loudly."""
    import sys

    from pipepool import worker

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is worker.serve.__code__:
            return frame.f_locals[name]
        frame = frame.f_back
    raise RuntimeError("not running inside pipepool.worker.serve")


def write_to_result_pipe(data: bytes, then: str = "return", forge_result=None):
    """Write raw ``data`` on the worker's own result pipe (in one write, followed by a
    well-formed DONE frame for this very task when ``forge_result`` is given), then
    "return", "exit" or "sleep" (until the parent kills us; bounded)."""
    import pickle

    from pipepool.frames import ELAPSED, Kind, encode_header

    if forge_result is not None:
        payload = ELAPSED.pack(0.0) + pickle.dumps(forge_result, 5)
        data += encode_header(Kind.DONE, _serve_local("ident"), len(payload)) + payload
    os.write(_serve_local("result_fd"), data)
    if then == "exit":
        os._exit(0)
    if then == "sleep":
        time.sleep(30)
    return "returned"


def return_above_frame_limit(limit: int, size: int) -> bytes:
    """Lower this worker's frame limit, then return more than it: the worker must refuse
    to send the result (a TaskPicklingError), as for a result past the 4 GiB header."""
    from pipepool import frames

    frames.MAX_PAYLOAD = limit
    return b"r" * size


def stamp_and_fail_init(log: str) -> None:
    """An initializer that records when it ran (monotonic, system-wide) and raises."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.monotonic()!r} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    raise RuntimeError("initializer says no")


def slow_init(log: str, seconds: float) -> None:
    """An initializer that takes ``seconds``; records each run, then sets the flag."""
    record(log, os.getpid())
    time.sleep(seconds)
    _initialized["flag"] = "ready"


def hog_gil(log: str, key, limit: float = 60.0) -> None:
    """Spin without letting another thread of this worker run, so its watcher thread
    cannot answer a REVOKE or CANCEL sent once ``hogging(log)`` holds. The run is
    recorded first (its file calls hand the GIL over). A kill ends it; ``limit`` bounds
    it if nobody does.

    Once the switch interval is an hour, a thread waiting for the GIL waits an hour,
    unless the holder hands it over in a system call or the thread began waiting under
    the old interval (it forces one switch when that runs out). So: no system call after
    the flag, and the flag only after ten old intervals of spinning."""
    import mmap
    import sys

    record(log, key)
    fd = os.open(f"{log}.hogging", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 1)
        flag = mmap.mmap(fd, 1)
    finally:
        os.close(fd)
    settle = 10 * sys.getswitchinterval()
    sys.setswitchinterval(3600)
    began = time.monotonic()
    while time.monotonic() - began < settle:
        pass  # a thread waiting since before the change takes its one turn now
    flag[0] = 1  # a store into shared memory: no system call, the GIL stays held
    while time.monotonic() - began < limit:
        pass


def hogging(log: str) -> bool:
    """Does ``hog_gil(log, ...)`` hold its worker's GIL for good (its flag is set)?"""
    try:
        with open(f"{log}.hogging", "rb") as f:
            return f.read(1) == b"\x01"
    except FileNotFoundError:
        return False


BIG_SHARED = bytes(range(256)) * 1024  # 256 KiB: big enough to be a piece of its own pickle


def big_shared(_=None) -> bytes:
    """The same big object as every earlier call: no result may refer to an earlier one."""
    return BIG_SHARED


def big_twice(seed: int) -> tuple:
    """One big object twice in one result: the second is a reference to the first."""
    data = bytes([seed % 256]) * (1 << 17)
    return data, data


def big_bytearray(seed: int) -> bytearray:
    return bytearray([seed % 256]) * (1 << 17)


def big_then_unpicklable(_=None) -> list:
    """A result whose pickling fails after its big piece was handed over."""
    return [BIG_SHARED, lambda: None]


# -- big payloads through the shared rings (tests/worker/test_shared_payloads.py) ---------------


def reverse_bytes(data: bytes) -> bytes:
    """A result as big as the argument and derived from all of it."""
    return data[::-1]


def die_once(path: str) -> str:
    """Run while a worker unpickles its call: the first time, kill the worker there."""
    if not os.path.exists(path):
        open(path, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


class DieWhileUnpickled:
    """An argument whose unpickling kills the worker, once (``die_once``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (die_once, (self.path,))


def fork_survivor(path: str) -> int:
    """Fork a child that leaves this worker's process group and outlives it (60 s at most):
    a process that may still hold what its worker held. Its pid goes to ``path``, written
    by the child once it has left the group: a reader that sees it may kill the worker
    (and its group) at once."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            with open(path + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(path + ".tmp", path)  # whole or absent to a reader
            time.sleep(60)
        finally:
            os._exit(0)
    return pid


def held(started: str, go: str) -> str:
    """Run while a worker unpickles its call: say so, then wait for ``go`` (bounded)."""
    open(started, "w").close()
    wait_for(go, limit=30)
    return "held"


class HeldWhileUnpickled:
    """An argument whose unpickling holds the worker until the test lets it go."""

    def __init__(self, started: str, go: str) -> None:
        self.started, self.go = started, go

    def __reduce__(self):
        return (held, (self.started, self.go))


def exit_behind_a_holder(code: int, hold: float = 60.0) -> None:
    """Fork a child that keeps every fd this worker holds (its result pipe's write end
    too) and sleeps ``hold`` s in the worker's process group, then end the worker with
    ``code``: no EOF tells its parent, only the exit itself (the child goes with the
    worker's group when the parent retires it)."""
    if os.fork() == 0:
        try:
            time.sleep(hold)
        finally:
            os._exit(0)
    os._exit(code)


def is_open(fd: int) -> bool:
    """Does ``fd`` name an open file of this process?"""
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def pipes_held(_=None) -> dict[int, tuple[int, int]]:
    """Every pipe end this process holds open: fd -> the pipe's (st_dev, st_ino), which
    both ends of one pipe share, in any process that holds them."""
    import stat

    import proc_table

    held = {}
    for fd in proc_table.open_fds():
        try:
            st = os.fstat(fd)
        except OSError:  # the listing's own fd, closed by now
            continue
        if stat.S_ISFIFO(st.st_mode):
            held[fd] = (st.st_dev, st.st_ino)
    return held


def fork_registry(_=None) -> list[int]:
    """This process's fork registry (``_PARENT_FDS``): in a worker with no pool of its own,
    any number listed is its parent's pools' fd, which it closed (or which a later fd
    took): a pool made here would have its forked workers close it."""
    from pipepool.executor import _state

    return sorted(_state._PARENT_FDS)


def write_through(fds: list[int]) -> list[int]:
    """Write a byte through each of ``fds``; those that are not open (any more)."""
    bad = []
    for fd in fds:
        try:
            os.write(fd, b".")
        except OSError:
            bad.append(fd)
    return bad


def nested_pool_keeps_my_files(path: str, impl: str, below: int) -> tuple[int, list[int]]:
    """Give every closed fd number below ``below`` to one file (as a task's log file takes
    a number its worker freed), start a fork LocalExecutor here, and have its task write
    through each: how many were given, and the ones its worker had lost."""
    from pipepool import LocalExecutor

    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    given = [fd for fd in range(3, below) if not is_open(fd)]
    for fd in given:
        os.dup2(log, fd)
    try:
        ex = LocalExecutor(1, start_method="fork", loop_impl=impl)
        ex.start()
        try:
            ex.queue("w", write_through, given)
            deadline = time.monotonic() + 60.0
            while ex.has_work() and time.monotonic() < deadline:
                ex.sync(timeout=0.05)
            event = ex.get_event_buffer()["w"]
            if event.exception is not None:
                raise event.exception
            return len(given), event.result
        finally:
            ex.end()
    finally:
        for fd in (*given, log):
            os.close(fd)
