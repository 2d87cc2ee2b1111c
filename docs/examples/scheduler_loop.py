"""The first scheduler loop: queue keyed work, run rounds, read each key's events."""

from pipepool import LocalExecutor, State


def square(n: int) -> int:
    return n * n


if __name__ == "__main__":  # workers import this module unless they are forked
    results = {}
    with LocalExecutor(parallelism=2) as ex:
        for n in range(100):
            ex.queue(("square", n), square, n)  # any hashable key
        while ex.has_work():
            ex.sync(timeout=0.1)  # one round; never blocks on a pipe
            for key, event in ex.get_event_buffer().items():
                if event.state is State.SUCCESS:
                    results[key] = event.result
                elif event.state is State.FAILED:
                    print(key, "failed:", event.reason, event.exception)
    assert results[("square", 7)] == 49 and len(results) == 100
    print(f"{len(results)} tasks done, 7 squared is {results[('square', 7)]}")
