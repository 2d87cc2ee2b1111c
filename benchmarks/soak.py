"""Soak: drive one LocalExecutor for a given time under random faults; nothing may be lost.

For ``--minutes`` the parent keeps a window of tasks outstanding: arguments and results of
random sizes (0 B to 1 MiB, log-uniform), a few tasks that raise, exit the worker or run
past a timeout, random SIGKILLs of busy workers, and random interrupts (a SIGALRM whose
handler raises KeyboardInterrupt part way through ``sync``, as tests/contract/test_invariants.py).
Once a minute it drains the window, starts any missing worker and samples the parent at
that quiet point: RSS, fds, children. At the end it checks:

* exact accounting: every key exactly one terminal event, every result right, every
  failure of the kind its task calls for (a healthy task only fails when its worker was
  SIGKILLed, at most one per kill), ``stats()`` agreeing with the events;
* a flat parent: quiet-point RSS of the last minute within ``--rss-slack`` MiB of the
  first, the same fd count and exactly ``parallelism`` live children (no zombie) at every
  quiet point, and no child and no extra fd after ``end()``.

It prints a line per minute and a summary; the exit status is 0 when every check passed.

    python benchmarks/soak.py --minutes 10                     # fork, compiled loop
    python benchmarks/soak.py --minutes 2 --impl python --start-method spawn
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import signal
import sys
import time
from collections import Counter

try:
    import pipepool
except ImportError:  # a source checkout without an install: use src/ (build the .so first)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import pipepool

from pipepool import LocalExecutor, State, TaskTimeoutError, WorkerLostError

MIB = 1 << 20
OK, RAISES, EXITS, SLOW = "ok", "raises", "exits", "slow"
KINDS = (OK, RAISES, EXITS, SLOW)
WEIGHTS = (0.96, 0.025, 0.01, 0.005)  # per queued task
SLOW_TIMEOUT = 0.1  # s: a "slow" task sleeps past it and is killed


# -- the work (module level: spawned workers import it from this file) -------------------


def pattern(key: int, size: int) -> bytes:
    """``size`` bytes that depend on ``key``: a wrong or mixed-up result cannot match."""
    unit = key.to_bytes(8, "little")
    return (unit * (size // 8 + 1))[:size]


def work(key: int, arg: bytes, size: int, nap: float) -> tuple[int, int, bytes, bytes]:
    if nap:
        time.sleep(nap)
    return key, len(arg), arg[:8], pattern(key, size)


def fail(key: int) -> None:
    raise ValueError(f"soak task {key} fails on purpose")


def exit_worker(code: int) -> None:
    os._exit(code)


def sleep_long(seconds: float) -> None:
    time.sleep(seconds)


# -- the parent ------------------------------------------------------------------------


class Interrupt(KeyboardInterrupt):
    """Raised by the SIGALRM handler: a Ctrl-C that lands inside ``sync``."""


def _interrupt(*_: object) -> None:
    raise Interrupt


def rss() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes (Linux); ru_maxrss twice elsewhere."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS
        return peak, peak


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"))


def children(ppid: int) -> dict[int, str]:
    """``{pid: state letter}`` of the children of ``ppid`` (zombies included)."""
    if os.path.isdir("/proc"):
        kids = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if int(fields[1]) == ppid:
                    kids[int(entry)] = fields[0]
        return kids
    import subprocess

    out = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True, text=True, check=False
    ).stdout
    return {
        int(p): s[0] for p, pp, s in (line.split() for line in out.splitlines()) if int(pp) == ppid
    }


def pool_children(start_method: str) -> dict[int, str]:
    """The pool's processes: our children, or the forkserver's (the server is not ours)."""
    if start_method == "forkserver":
        from multiprocessing import forkserver

        server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
        return children(server) if server else {}
    return {p: s for p, s in children(os.getpid()).items() if not _helper(p)}


def _helper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return b"forkserver" in cmd or b"resource_tracker" in cmd


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.ex = LocalExecutor(
            args.parallelism,
            start_method=args.start_method,
            prefetch=args.prefetch,
            loop_impl=args.impl,
        )
        # Only outstanding keys are kept, and one byte per key ever queued: the soak's own
        # memory must stay flat too, or it would hide the pool's.
        self.kinds: dict[int, str] = {}  # outstanding key -> kind
        self.expect: dict[int, tuple[int, bytes, int]] = {}  # key -> (arg len, head, size)
        self.reported = bytearray()  # per key: 1 once its terminal event arrived
        self.duplicates: list[int] = []
        self.outcomes: Counter = Counter()  # "kind: how it ended"
        self.events: Counter = Counter()  # success / failed / lost, to check stats()
        self.lost_per_victim: Counter = Counter()
        self.seen_running: set[int] = set()  # pids that reported a task: past start-up
        self.victims: set[int] = set()
        self.interrupts = 0
        self.interrupt_checks = 0
        self.next_key = 0
        self.rows: list[dict] = []
        self.problems: list[str] = []

    # -- driving ----------------------------------------------------------------------

    def queue_one(self) -> None:
        rng = self.rng
        key = self.next_key
        self.next_key += 1
        self.reported.append(0)
        kind = rng.choices(KINDS, WEIGHTS)[0]
        self.kinds[key] = kind
        if kind == OK:
            arg = os.urandom(self.size()) if rng.random() < 0.5 else b"a" * self.size()
            size = self.size()
            nap = rng.choice((0.0, 0.0, 0.0005, 0.002))
            self.expect[key] = (len(arg), arg[:8], size)
            self.ex.queue(key, work, key, arg, size, nap)
        elif kind == RAISES:
            self.ex.queue(key, fail, key)
        elif kind == EXITS:
            self.ex.queue(key, exit_worker, 3)
        else:
            self.ex.queue_call(key, sleep_long, (30,), timeout=SLOW_TIMEOUT)

    def size(self) -> int:
        """0 B one time in ten, else log-uniform from 1 B to 1 MiB."""
        if self.rng.random() < 0.1:
            return 0
        return int(2 ** self.rng.uniform(0, math.log2(self.args.max_size)))

    def take(self) -> None:
        for key, event in self.ex.get_event_buffer().items():
            assert isinstance(key, int)  # every task is queued under its number
            if event.state.terminal:
                if self.reported[key]:
                    self.duplicates.append(key)
                    continue
                self.reported[key] = 1
                self.judge(key, self.kinds.pop(key), event)
            elif event.pid is not None:
                self.seen_running.add(event.pid)

    def judge(self, key: int, kind: str, event) -> None:
        """Check one terminal event against what its task calls for, then forget it."""
        error = event.exception
        expect = self.expect.pop(key, None)
        self.events["success" if event.state is State.SUCCESS else "failed"] += 1
        if isinstance(error, WorkerLostError):
            self.events["lost"] += 1
            if error.signal == "SIGKILL" and error.pid in self.victims:
                self.lost_per_victim[error.pid] += 1
                self.outcomes[f"{kind}: lost to a kill"] += 1
                return
        self.outcomes[f"{kind}: {event.reason}"] += 1
        if kind == OK:
            assert expect is not None, f"task {key} was never queued"
            arg_len, head, size = expect
            right = event.state is State.SUCCESS and event.result == (
                key,
                arg_len,
                head,
                pattern(key, size),
            )
        elif kind == RAISES:
            right = type(error) is ValueError and str(error) == (
                f"soak task {key} fails on purpose"
            )
        elif kind == EXITS:
            right = isinstance(error, WorkerLostError) and error.exitcode == 3
        else:
            right = isinstance(error, TaskTimeoutError)
        if not right:
            self.problems.append(f"key {key} ({kind}) ended wrong: {event._replace(result=None)}")

    def round(self, interrupt: bool) -> None:
        if not interrupt:
            self.ex.sync(timeout=0.005)
            self.take()
            return
        try:
            signal.setitimer(signal.ITIMER_REAL, self.rng.uniform(0.00005, 0.003))
            self.ex.sync(timeout=0.003)
            signal.setitimer(signal.ITIMER_REAL, 0)
        except Interrupt:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.interrupts += 1
        self.take()
        self.check_places()

    def check_places(self) -> None:
        """Invariant 3 after an interrupt: each key queued, running or reported, once
        (the keys not reported yet are exactly those queued or running, none in both)."""
        queued, running = self.ex.queued, self.ex.running
        if queued & running:
            self.problems.append(f"a key queued and running after interrupt {self.interrupts}")
        if queued | running != self.kinds.keys():
            self.problems.append(
                f"a key in no place or reported and still held after interrupt {self.interrupts}"
            )
        self.interrupt_checks += 1

    def kill_one(self) -> None:
        """SIGKILL a worker that has run a task (one that dies before its first frame
        would read as a start-up failure, which backs off: a different test)."""
        pids = [
            p for p in self.ex.worker_pids() if p in self.seen_running and p not in self.victims
        ]
        if pids:
            victim = self.rng.choice(pids)
            self.victims.add(victim)
            os.kill(victim, signal.SIGKILL)

    def drain(self) -> None:
        deadline = time.monotonic() + 120
        while self.ex.has_work():
            if time.monotonic() > deadline:
                self.problems.append(f"drain wedged: {self.ex.stats()}")
                return
            self.ex.sync(timeout=0.01)
            self.take()

    def quiet_point(self, minute: int, started: float, done_before: int) -> None:
        """Drain, bring the pool to full strength, sample the parent."""
        self.drain()
        self.ex.prestart()
        deadline = time.monotonic() + 30
        while len(self.ex.worker_pids()) < self.ex.parallelism and time.monotonic() < deadline:
            self.ex.sync(timeout=0.01)
            self.take()
        time.sleep(0.05)  # a killed worker's exit and the forkserver's reaping settle
        self.ex.sync()
        self.take()
        gc.collect()
        now_rss, peak = rss()
        kids = pool_children(self.args.start_method)
        stats = self.ex.stats()
        elapsed = time.monotonic() - started
        row = {
            "minute": minute,
            "rss": now_rss,
            "peak": peak,
            "fds": fd_count(),
            "children": len(kids),
            "zombies": sum(s == "Z" for s in kids.values()),
            "workers": len(self.ex.worker_pids()),
            "done": stats["tasks_done"],
            "failed": stats["tasks_failed"],
            "lost": stats["tasks_lost"],
            "kills": len(self.victims),
            "interrupts": self.interrupts,
            "queued": self.next_key,
            "rate": (stats["tasks_done"] + stats["tasks_failed"] - done_before) / elapsed,
        }
        self.rows.append(row)
        print(
            f"{minute:>4} {row['rss'] / MIB:>8.1f} {row['peak'] / MIB:>8.1f} {row['fds']:>4} "
            f"{row['children']:>4} {row['zombies']:>3} {row['queued']:>9} {row['done']:>9} "
            f"{row['failed']:>6} {row['lost']:>5} {row['kills']:>5} {row['interrupts']:>6} "
            f"{row['rate']:>8.0f}",
            flush=True,
        )

    def run(self) -> int:
        args = self.args
        fds_before = fd_count()
        previous = signal.signal(signal.SIGALRM, _interrupt)
        self.ex.start()
        print(
            f"soak: {args.minutes} min, parallelism {args.parallelism}, "
            f"{self.ex.start_method}, {self.ex.implementation} loop, prefetch "
            f"{args.prefetch}, window {args.window}, kill every ~{args.kill_every} s, "
            f"interrupt {args.interrupt_rate:.0%} of rounds, seed {args.seed}, "
            f"pipepool {pipepool.__version__}",
            flush=True,
        )
        print(
            " min  rss MiB peak MiB  fds kids  zb    queued      done failed  lost "
            "kills intrpt   tasks/s",
            flush=True,
        )
        end = time.monotonic() + args.minutes * 60
        minute = 0
        next_mark = time.monotonic() + 60
        next_kill = time.monotonic() + self.rng.expovariate(1 / args.kill_every)
        mark_started = time.monotonic()
        done_before = 0
        try:
            while time.monotonic() < end:
                stats = self.ex.stats()
                for _ in range(args.window - stats["tasks_queued"] - stats["tasks_running"]):
                    self.queue_one()
                self.round(self.rng.random() < args.interrupt_rate)
                if time.monotonic() >= next_kill:
                    self.kill_one()
                    next_kill = time.monotonic() + self.rng.expovariate(1 / args.kill_every)
                if time.monotonic() >= next_mark or time.monotonic() >= end:
                    minute += 1
                    self.quiet_point(minute, mark_started, done_before)
                    done_before = self.rows[-1]["done"] + self.rows[-1]["failed"]
                    mark_started = time.monotonic()
                    next_mark = mark_started + 60
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        self.drain()
        self.check_accounting()
        self.check_flat()
        self.ex.end()
        self.take()
        time.sleep(0.1)
        left = pool_children(args.start_method)
        if left:
            self.problems.append(f"children left after end(): {left}")
        if fd_count() != fds_before:
            self.problems.append(f"fds after end(): {fd_count()}, before start(): {fds_before}")
        self.summary()
        return 1 if self.problems else 0

    # -- checks -----------------------------------------------------------------------

    def check_accounting(self) -> None:
        problems = self.problems
        if self.duplicates:
            problems.append(f"{len(self.duplicates)} keys reported twice: {self.duplicates[:5]}")
        missing = self.reported.count(0)
        if missing:
            problems.append(f"{missing} keys never reported: {sorted(self.kinds)[:5]}")
        twice = {pid: n for pid, n in self.lost_per_victim.items() if n > 1}
        if twice:
            problems.append(f"a killed worker lost more than one task: {twice}")
        stats = self.ex.stats()
        if (stats["tasks_done"], stats["tasks_failed"], stats["tasks_lost"]) != (
            self.events["success"],
            self.events["failed"],
            self.events["lost"],
        ):
            problems.append(f"stats() disagrees with the events {dict(self.events)}: {stats}")

    def check_flat(self) -> None:
        rows = self.rows
        if not rows:
            self.problems.append("no minute completed")
            return
        growth = (rows[-1]["rss"] - rows[0]["rss"]) / MIB
        if growth > self.args.rss_slack:
            self.problems.append(
                f"quiet-point RSS grew {growth:.1f} MiB (slack {self.args.rss_slack} MiB)"
            )
        if len({r["fds"] for r in rows}) != 1:
            self.problems.append(f"fd count moved: {[r['fds'] for r in rows]}")
        for r in rows:
            if (
                r["children"] != self.ex.parallelism
                or r["zombies"]
                or (r["workers"] != self.ex.parallelism)
            ):
                self.problems.append(
                    f"minute {r['minute']}: {r['children']} children "
                    f"({r['zombies']} zombies), {r['workers']} workers"
                )

    def summary(self) -> None:
        rows = self.rows
        stats = self.ex.stats()
        print()
        print(
            f"tasks queued {self.next_key}, done {stats['tasks_done']}, failed "
            f"{stats['tasks_failed']} (lost {stats['tasks_lost']}), workers started "
            f"{stats['workers_started']}, crashes {stats['worker_crashes']}, kills "
            f"{len(self.victims)}, interrupts {self.interrupts} (bookkeeping checked "
            f"after each)"
        )
        for outcome, n in sorted(self.outcomes.items()):
            print(f"  {outcome}: {n}")
        if rows:
            print(
                f"quiet-point RSS {rows[0]['rss'] / MIB:.1f} -> {rows[-1]['rss'] / MIB:.1f} "
                f"MiB (min {min(r['rss'] for r in rows) / MIB:.1f}, max "
                f"{max(r['rss'] for r in rows) / MIB:.1f}); peak {rows[-1]['peak'] / MIB:.1f} "
                f"MiB; fds {sorted({r['fds'] for r in rows})}; children "
                f"{sorted({r['children'] for r in rows})}"
            )
        if self.problems:
            print(f"FAILED: {len(self.problems)} problem(s)")
            for p in self.problems[:20]:
                print(f"  - {p}")
        else:
            print(
                "OK: every key exactly one terminal event, results right, RSS flat, "
                "no fd or process growth"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--parallelism", "-j", type=int, default=2)
    parser.add_argument("--start-method", default="fork", choices=["fork", "spawn", "forkserver"])
    parser.add_argument(
        "--impl",
        choices=["python", "cython"],
        default=None,
        help="loop implementation (default: PIPEPOOL_IMPL, compiled if built)",
    )
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--window", type=int, default=64, help="tasks kept outstanding")
    parser.add_argument("--max-size", type=int, default=MIB, help="largest argument/result")
    parser.add_argument(
        "--kill-every", type=float, default=2.0, help="mean seconds between worker SIGKILLs"
    )
    parser.add_argument(
        "--interrupt-rate",
        type=float,
        default=0.05,
        help="share of rounds with a SIGALRM interrupt",
    )
    parser.add_argument(
        "--rss-slack",
        type=float,
        default=16.0,
        help="MiB the quiet-point RSS may grow from the first to the last minute",
    )
    parser.add_argument("--seed", type=int, default=8)
    return Soak(parser.parse_args(argv)).run()


if __name__ == "__main__":  # spawned workers import this file as __mp_main__: no run there
    sys.exit(main())
