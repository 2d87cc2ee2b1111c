"""LocalExecutor driven by asyncio's loop: watch its fds, step on them or its deadline."""

import asyncio
import os

from pipepool import LocalExecutor, State


def square(n: int) -> int:
    return n * n


def named(fds: list[int]) -> set[tuple[int, int]]:
    """Each fd with the pipe it names (its inode): when a worker is replaced, its
    replacement's pipe may get a number the old one had, and the loop must watch anew."""
    return {(fd, os.fstat(fd).st_ino) for fd in fds}


async def run(ex: LocalExecutor, count: int) -> dict:
    loop = asyncio.get_running_loop()
    results: dict = {}
    watched: tuple[set, set] = (set(), set())
    timer = None
    done = asyncio.Event()

    def step() -> None:  # a round (never waits), its events, then what to watch now
        nonlocal watched, timer
        ex.sync()
        for key, event in ex.get_event_buffer().items():
            if event.state is State.SUCCESS:
                results[key] = event.result
        readable, writable = map(named, ex.watched_fds())
        for fd, _ in watched[0] - readable:
            loop.remove_reader(fd)
        for fd, _ in readable - watched[0]:
            loop.add_reader(fd, step)
        for fd, _ in watched[1] - writable:
            loop.remove_writer(fd)
        for fd, _ in writable - watched[1]:
            loop.add_writer(fd, step)
        watched = (readable, writable)
        if timer is not None:
            timer.cancel()
        timer = loop.call_at(ex.next_deadline(), step)  # asyncio's clock is monotonic
        if not ex.has_work():
            done.set()

    for n in range(count):
        ex.queue(n, square, n)
    step()
    await done.wait()
    for fd, _ in watched[0]:
        loop.remove_reader(fd)
    for fd, _ in watched[1]:
        loop.remove_writer(fd)
    timer.cancel()
    return results


if __name__ == "__main__":  # workers import this module unless they are forked
    with LocalExecutor(parallelism=2) as ex:
        results = asyncio.run(run(ex, 100))
    assert results == {n: n * n for n in range(100)}
    print(f"{len(results)} tasks done through asyncio's loop, 7 squared is {results[7]}")
