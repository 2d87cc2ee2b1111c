"""A scheduler's view of failures: each task ends with exactly one terminal event,
and its exception says why by its type."""

import os
import signal
import time

from pipepool import LocalExecutor, State, TaskTimeoutError, WorkerLostError


def crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-task


def nap(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


if __name__ == "__main__":
    outcome = {}
    with LocalExecutor(parallelism=2) as ex:
        ex.queue("crash", crash)
        ex.queue_call("slow", nap, (30,), {}, timeout=0.5)  # bounded from its start
        ex.queue("fine", nap, 0.01)
        while ex.has_work():
            ex.sync(timeout=0.1)
            for key, event in ex.get_event_buffer().items():
                if event.state.terminal:
                    outcome[key] = event
        stats = ex.stats()
    assert isinstance(outcome["crash"].exception, WorkerLostError)
    assert isinstance(outcome["slow"].exception, TaskTimeoutError)
    assert outcome["fine"].state is State.SUCCESS and outcome["fine"].result == "woke"
    for key, event in sorted(outcome.items()):
        print(f"{key:6} {event.reason}")
    print("workers lost:", stats["tasks_lost"])
