"""What ``concurrent.futures.wait(fs)`` adds per future in the parent, beyond ``result()``,
over what the standard library's own ``wait()`` adds on bare Futures: the suite's target
row (at most 1 µs), alone and with more rounds.

    python -m benchmarks.wait_cpu -p 8 --rounds 7
    python -m benchmarks.wait_cpu --install          # a waiter's install, per future

The suite's row is a difference of four medians of CPU per task (pipepool submit+wait
and submit+result, the stdlib's wait and result on bare Futures), whose rounds spread by
a few µs each on 2 cores. Here the four samples of a round run back to back, each on a
fresh pool as in the suite, so each round also gives its own difference; both are
printed. ``--install`` times instead the one step of ``wait()`` whose cost per future
is pipepool's own: putting the waiter on each future (``_create_and_install_waiters``),
on futures of a pipepool pool against the stdlib's Futures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ALL_COMPLETED, Future
from concurrent.futures import _base as futures_base
from typing import Any

import pipepool

from .contenders import SPECS
from .measures import throughput_sample
from .targets import WAIT_BEYOND, WAIT_OURS, beyond_value
from .tasks import noop

# The suite's wait(fs) row's four samples, in the order a round runs them.
KEYS = (WAIT_BEYOND[0], WAIT_OURS, WAIT_BEYOND[2], WAIT_BEYOND[1])


def beyond(cpu: dict[str, float]) -> float:
    """µs per future: pipepool's wait() over its result(), minus the stdlib's own (the
    suite's row, ``targets.beyond_value``)."""
    return beyond_value(cpu[WAIT_OURS], *(cpu[key] for key in WAIT_BEYOND))


def install_us(futures: list[Any]) -> float:
    """µs per future to install one ``wait()`` waiter on each of ``futures`` (done ones:
    nothing completes meanwhile), as ``wait()`` does, the first time for each."""
    started = time.perf_counter()
    futures_base._create_and_install_waiters(futures, ALL_COMPLETED)  # type: ignore[attr-defined]
    return 1e6 * (time.perf_counter() - started) / len(futures)


def install(tasks: int, rounds: int) -> None:
    """``install_us`` on a pipepool pool's futures and on the stdlib's, ``rounds`` times."""
    ours, stdlib = [], []
    with pipepool.ProcessPoolExecutor(2) as pool:
        for _ in range(rounds):
            futures = [pool.submit(noop, i) for i in range(tasks)]
            for f in futures:
                f.result()
            time.sleep(0.2)  # the pool's driver thread stops looking (its LINGER_IDLE)
            ours.append(install_us(futures))
            bare: list[Future[int]] = [Future() for _ in range(tasks)]
            for f in bare:
                f.set_result(0)
            stdlib.append(install_us(bare))
    print(
        f"installing a wait() waiter, µs per future (median of {rounds}): pipepool "
        f"{statistics.median(ours):.3f}, the stdlib's Future {statistics.median(stdlib):.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-p", "--parallelism", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--install", action="store_true", help="time a waiter's install")
    args = parser.parse_args(argv)
    if args.install:
        install(args.tasks, args.rounds)
        return
    calls = list(range(args.tasks))
    samples: dict[str, list[float]] = {k: [] for k in KEYS}
    for _ in range(args.rounds):
        for key in KEYS:
            sample = throughput_sample(
                SPECS[key], args.parallelism, noop, calls, lambda r: sorted(r) == calls
            )
            samples[key].append(sample["parent_cpu_us"])
    p = args.parallelism
    for key in KEYS:
        values = " ".join(f"{v:.2f}" for v in samples[key])
        median = statistics.median(samples[key])
        print(f"p={p} {key:16s} parent µs/task median {median:.2f}  ({values})")
    rounds = [beyond({k: samples[k][i] for k in KEYS}) for i in range(args.rounds)]
    of_medians = beyond({k: statistics.median(samples[k]) for k in KEYS})
    print(
        f"p={p} wait(fs) beyond the stdlib's: {of_medians:.2f} µs/future of the medians "
        f"(the suite's way); per round {' '.join(f'{v:.2f}' for v in rounds)}, "
        f"median {statistics.median(rounds):.2f}"
    )


if __name__ == "__main__":
    main()
