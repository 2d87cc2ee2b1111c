"""The compiled PipeLoop against its pure-Python twin: frames/s through echo workers.

Each worker is a child process that reads its activity pipe and writes every byte back
on its result pipe, so each frame the parent sends comes back byte-identical. The echo
copies whole pipe-fulls per system call, so its cost per frame is close to nothing and
what is measured is the parent: ``send`` (queue, encode, ``writev``) and ``poll``
(``poll``, ``read``, split into frames), plus the few bytecodes of this driver that are
the same for both loops. The parent keeps ``--window`` frames in flight per worker and
refills a worker as its frames come back. Two windows by default: a shallow one, where
the pipe never fills, so every ``send`` is one ``writev`` for both loops and the kernel's
cost (and waking the echo) is a large share of the total; and a deep one, where the pipe
is full, frames queue and leave in batched ``writev`` calls, so the loop's own work is
what is left. Rounds are interleaved (python, cython, python, ...) so noise from other
work on the machine hits both alike; the table shows medians and their ratio.

A second table runs no-op tasks through ``LocalExecutor`` with each loop (``loop_impl``)
at a few ``prefetch`` depths: the whole stack, pickling and bookkeeping included, where
the loop is one cost among several.

    python benchmarks/loop_bench.py            # 1,000,000 frames per run, 5 rounds
    python benchmarks/loop_bench.py -n 200000 --rounds 5 --out benchmarks/results/loop_bench.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

try:
    import pipepool
except ImportError:  # a source checkout without an install: use src/ (build the .so first)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import pipepool

from pipepool import loop as _impl
from pipepool._bench import run_local

IMPLS = ("python", "cython")

ECHO = """
import os, sys
r, w = int(sys.argv[1]), int(sys.argv[2])
while True:
    data = os.read(r, 1 << 16)
    if not data:
        break
    view = memoryview(data)
    while view:
        view = view[os.write(w, view):]
"""


class EchoWorkers:
    """``count`` echo processes, each added to ``loop`` as a channel (0 .. count-1)."""

    def __init__(self, loop, count: int) -> None:
        self.procs = []
        for channel in range(count):
            act_r, act_w = os.pipe()
            res_r, res_w = os.pipe()
            proc = subprocess.Popen(
                [sys.executable, "-c", ECHO, str(act_r), str(res_w)], pass_fds=(act_r, res_w)
            )
            os.close(act_r)
            os.close(res_w)
            loop.add(channel, act_w, res_r)
            self.procs.append(proc)

    def wait(self) -> None:
        for proc in self.procs:  # the loop closed their activity pipes: EOF, exit
            proc.wait(timeout=30)


def frames_per_second(impl: str, frames: int, workers: int, size: int, window: int) -> float:
    module = _impl.load(impl)[1]
    loop = module.PipeLoop()
    echo = EchoWorkers(loop, workers)
    payload = b"x" * size
    send, poll = loop.send, loop.poll
    try:
        # Warm up (the children start, the first frames come back), then measure.
        for channel in range(workers):
            send(channel, 1, 0, payload)
        back = 0
        while back < workers:
            got, closed = poll(5.0)
            assert not closed, f"an echo worker died: {closed}"
            back += len(got)
        started = time.perf_counter()
        sent = 0
        for channel in range(workers):
            for _ in range(window):
                if sent < frames:
                    send(channel, 1, sent, payload)
                    sent += 1
        received = 0
        while received < frames:
            got, closed = poll(5.0)
            assert not closed, f"an echo worker died: {closed}"
            received += len(got)
            # Refill each worker with as many frames as came back from it (the driver's
            # own cost is the same for both loops; keep it small so it hides little).
            refill = min(len(got), frames - sent)
            for channel, _kind, _ident, _payload in got[:refill] if refill < len(got) else got:
                send(channel, 1, sent, payload)
                sent += 1
        elapsed = time.perf_counter() - started
    finally:
        loop.close()
        echo.wait()
    return frames / elapsed


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [
        title,
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n",
        "--frames",
        type=int,
        default=1_000_000,
        help="frames pushed through the echo workers per round and loop",
    )
    parser.add_argument("-w", "--workers", type=int, default=2, help="echo workers")
    parser.add_argument("--size", type=int, default=16, help="payload bytes per frame")
    parser.add_argument(
        "--window",
        type=int,
        nargs="+",
        default=[256, 4096],
        help="frames in flight per worker (one table row each)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians)")
    parser.add_argument(
        "--tasks",
        type=int,
        default=20_000,
        help="no-op tasks per executor run (0: skip the executor table)",
    )
    parser.add_argument(
        "--prefetch",
        type=int,
        nargs="+",
        default=[1, 16, 64],
        help="LocalExecutor prefetch depths to run",
    )
    parser.add_argument("--out", help="also write the tables (markdown) to this file")
    args = parser.parse_args()
    for impl in IMPLS:
        _impl.load(impl)  # fail now, not after a round, if the compiled loop is missing

    cores = os.cpu_count()
    loop_samples: dict[tuple[str, int], list[float]] = {
        (impl, w): [] for w in args.window for impl in IMPLS
    }
    exec_samples: dict[tuple[str, int], list[float]] = {
        (impl, p): [] for p in args.prefetch for impl in IMPLS
    }
    for r in range(args.rounds):
        for window in args.window:
            for impl in IMPLS:  # interleaved: noise hits both alike
                rate = frames_per_second(impl, args.frames, args.workers, args.size, window)
                loop_samples[impl, window].append(rate)
                print(
                    f"round {r + 1}: window {window:>5}: {impl:6} loop {rate:>12,.0f} frames/s",
                    file=sys.stderr,
                    flush=True,
                )
        if args.tasks:
            for prefetch in args.prefetch:
                for impl in IMPLS:
                    exec_samples[impl, prefetch].append(
                        run_local(args.tasks, args.workers, prefetch, impl)
                    )

    ratios = {}
    rows = []
    for window in args.window:
        py = statistics.median(loop_samples["python", window])
        cy = statistics.median(loop_samples["cython", window])
        ratios[window] = cy / py
        rows.append([str(window), f"{py:,.0f}", f"{cy:,.0f}", f"{cy / py:.2f}x"])
    out = [
        table(
            f"PipeLoop: {args.frames:,} frames of {args.size} bytes through {args.workers} echo "
            f"workers, median of {args.rounds} interleaved rounds, frames/s ({cores} cores, "
            f"Python {sys.version.split()[0]}, pipepool {pipepool.__version__})",
            ["window (frames in flight per worker)", "python loop", "cython loop", "ratio"],
            rows,
        )
    ]
    if args.tasks:
        rows = []
        for prefetch in args.prefetch:
            py = statistics.median(exec_samples["python", prefetch])
            cy = statistics.median(exec_samples["cython", prefetch])
            rows.append([str(prefetch), f"{py:,.0f}", f"{cy:,.0f}", f"{cy / py:.2f}x"])
        out.append(
            table(
                f"LocalExecutor: {args.tasks:,} no-op tasks, {args.workers} workers, median of "
                f"{args.rounds} interleaved rounds, tasks/s",
                ["prefetch", "python loop", "cython loop", "ratio"],
                rows,
            )
        )
    text = "\n\n".join(out)
    print(text)
    print(
        "\ncompiled/pure frames/s ratio: "
        + ", ".join(f"{r:.2f}x at window {w}" for w, r in ratios.items())
        + " (target: at least 3x)"
    )
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
