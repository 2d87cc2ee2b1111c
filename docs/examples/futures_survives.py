"""A worker that dies fails only its own future; the pool serves on."""

import os

from pipepool import ProcessPoolExecutor, WorkerLostError


def die() -> None:
    os._exit(3)


def double(n: int) -> int:
    return 2 * n


if __name__ == "__main__":
    with ProcessPoolExecutor(max_workers=2) as pool:
        lost = pool.submit(die)
        try:
            lost.result(timeout=30)
        except WorkerLostError as exc:  # a BrokenProcessPool subclass
            print("lost:", exc.pid is not None, "exit code", exc.exitcode)
        print("still serving:", pool.submit(double, 21).result(timeout=30))
