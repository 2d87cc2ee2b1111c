"""A scheduler's heartbeat: how many ``sync()`` calls until big payloads are through.

    python -m benchmarks.heartbeat [--tasks 10] [--mib 1] [--interval 0.1] [--pipes]

Issue 26's case: ``LocalExecutor(2)``, ten tasks each taking a distinct 1 MiB ``bytes``
and returning a 1 MiB ``bytes``, one ``sync()`` (no timeout) then ``time.sleep(0.1)``,
as Airflow's scheduler heartbeats its executor; counted until every terminal event is
read. Through the pipes (``--pipes``: the shared regions off) a non-blocking ``sync()``
moves one pipe-full per worker each way, 16 calls per MiB; the target is at most 1.5
calls per task. A count, so load moves it less than a time: a loaded machine may leave
a task unfinished at a heartbeat, which adds calls. The test that guards the target
counts without sleeping (tests/worker/test_shared_payloads.py).
"""

from __future__ import annotations

import argparse
import sys
import time

from .tasks import MIB


def reverse(data: bytes) -> bytes:
    """A result as big as the argument, derived from all of it."""
    return data[::-1]


def distinct(i: int, size: int) -> bytes:
    return (i.to_bytes(4, "little") + bytes(range(252))) * (size // 256) + bytes(size % 256)


def heartbeats(
    tasks: int, size: int, interval: float, parallelism: int, start_method: str | None
) -> int:
    """The ``sync()`` calls until every task's terminal event was read."""
    from pipepool import LocalExecutor

    args = {i: distinct(i, size) for i in range(tasks)}
    with LocalExecutor(parallelism, start_method=start_method) as ex:
        for i, arg in args.items():
            ex.queue(i, reverse, arg)
        done: dict = {}
        calls = 0
        while len(done) < tasks:
            ex.sync()
            calls += 1
            done.update((k, e) for k, e in ex.get_event_buffer().items() if e.state.terminal)
            if len(done) < tasks:
                time.sleep(interval)
    wrong = [i for i, arg in args.items() if done[i].result != arg[::-1]]
    if wrong:
        raise SystemExit(f"wrong results for tasks {wrong}")
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.heartbeat")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--mib", type=float, default=1.0, help="MiB in and out per task")
    parser.add_argument("--interval", type=float, default=0.1, help="s between sync() calls")
    parser.add_argument("-p", "--parallelism", type=int, default=2)
    parser.add_argument("--start-method", choices=["fork", "spawn", "forkserver"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pipes", action="store_true", help="the shared regions off: every payload by pipe"
    )
    args = parser.parse_args(argv)
    if args.pipes:
        from pipepool.worker import _region

        _region.THRESHOLD = 1 << 62  # the parent writes it into each region it makes
    size = int(args.mib * MIB)
    counts = [
        heartbeats(args.tasks, size, args.interval, args.parallelism, args.start_method)
        for _ in range(args.rounds)
    ]
    per_task = [c / args.tasks for c in counts]
    how = "pipes only" if args.pipes else "shared regions"
    print(
        f"heartbeat sync() every {args.interval:g} s, {args.mib:g} MiB in and out, "
        f"{args.tasks} tasks on {args.parallelism} workers ({how}): "
        f"{', '.join(f'{x:.1f}' for x in per_task)} calls per task (target <= 1.5)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
