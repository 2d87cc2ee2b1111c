"""When the next job may start, and in which job slot: ``{%}``, ``--pin``, ``--delay``,
``--load``, ``--memfree``.

Without any of these the runner queues jobs ahead of the free workers (the fast path).
With any of them it starts a job only when a slot is free and the gate is open, so a
job's slot, cores and start time are known when it is sent:

* **slots** (``{%}``, ``$PARALLEL_JOBSLOT``, ``--pin``): the lowest free number in
  1..-j; a slot is freed only by its job's final event, which comes after the job's
  whole process tree was killed and reaped, so two running jobs never share one.
* ``--pin``/``--cpus-per-job K``: slot s owns the CPUs the measuring room's plan gives
  it (``pipepool.measure``: by the machine's topology, among those this process may
  use and no other run leases); the job's probe pins its worker there before it starts
  the job, so the job and all it starts inherit the mask.
* ``--delay D``: no job starts within D seconds of the previous one.
* ``--load MAX``: no job starts while the number of running processes (GNU parallel's
  instant "load": tasks running or in uninterruptible sleep, less the one counting)
  is MAX or more. ``--memfree SIZE``: none while free memory (GNU parallel's sum of
  MemFree, Buffers, Cached and SwapCached) is below SIZE; below half of SIZE the
  youngest job is killed and put back on the queue.
"""

from __future__ import annotations

from .. import host

SAMPLE_INTERVAL = 0.1  # s between samples of load and free memory while waiting: prompt
# enough for jobs that last seconds, and one small /proc read per sample


class GateError(ValueError):
    """The options cannot be honoured here (a message for the user)."""


class Gate:
    def __init__(
        self,
        jobs: int,
        *,
        slots: bool = False,
        cpus: list[tuple[int, ...]] | None = None,
        delay: float = 0.0,
        load: float | None = None,
        memfree: int | None = None,
        proc_stat: str | None = None,
        meminfo: str | None = None,
    ) -> None:
        self.jobs = jobs
        self.cpus = cpus  # slot s's CPUs (--pin: the measuring room's plan): cpus[s - 1]
        slots = slots or cpus is not None
        self.proc_stat = proc_stat or host.proc_stat()  # tests: files they control
        self.meminfo = meminfo or host.meminfo()
        if load is not None and host.running_processes(self.proc_stat) is None:
            raise GateError(f"--load reads {self.proc_stat}, which this system does not have")
        if memfree is not None and host.free_memory(self.meminfo) is None:
            raise GateError(f"--memfree reads {self.meminfo}, which this system does not have")
        self.slots = slots
        self.delay = delay
        self.load = load
        self.memfree = memfree
        self.exclusive = slots or delay > 0 or load is not None or memfree is not None
        self._free = list(range(jobs, 0, -1))  # a stack: the lowest number on top
        self._next_start = 0.0
        self._next_sample = 0.0
        self.waiting = ""  # why the last ready() said no, for a note to the user

    # -- slots ----------------------------------------------------------------------------

    def take(self) -> tuple[int, tuple[int, ...] | None]:
        """A free slot and its cores (None unless --pin); (0, None) without slots."""
        if not self.slots:
            return 0, None
        slot = self._free.pop()
        return slot, (self.cpus[slot - 1] if self.cpus else None)

    def release(self, slot: int) -> None:
        if slot:
            self._free.append(slot)
            self._free.sort(reverse=True)

    def has_slot(self) -> bool:
        return not self.slots or bool(self._free)

    # -- may a job start now? -----------------------------------------------------------

    def ready(self, now: float) -> bool:
        if now < self._next_start:
            return False
        if self.load is None and self.memfree is None:
            return True
        if now < self._next_sample:
            return False
        self._next_sample = now + SAMPLE_INTERVAL
        if self.load is not None:
            load = host.running_processes(self.proc_stat)
            if load is not None and load >= self.load:  # None: gone meanwhile, no say
                self.waiting = f"--load {self.load:g}: {load} processes running"
                return False
        if self.memfree is not None:
            free = host.free_memory(self.meminfo)
            if free is not None and free < self.memfree:
                self.waiting = f"--memfree {_size(self.memfree)}: {_size(free)} free"
                return False
        self._next_sample = 0.0  # the next job decides on a fresh sample
        return True

    def started(self, now: float) -> None:
        """A job was sent: the next waits ``--delay`` (counted from when this one is seen
        running, ``running``), and counts this one in the load."""
        if self.delay:
            self._next_start = float("inf")
        if self.load is not None or self.memfree is not None:
            self._next_sample = now + SAMPLE_INTERVAL  # let the job show up in /proc first

    def running(self, now: float) -> None:
        """The job sent last has started (or already ended): ``--delay`` counts from now,
        so a worker's start-up does not eat into the delay."""
        if self.delay and self._next_start == float("inf"):
            self._next_start = now + self.delay

    def wait_for(self, now: float) -> float | None:
        """Seconds until ``ready`` may change, or None if only a finished job can."""
        times = [t for t in (self._next_start, self._next_sample) if now < t < float("inf")]
        if self.load is not None or self.memfree is not None:
            times.append(now + SAMPLE_INTERVAL)
        return min(times) - now if times else None

    def memory_low(self) -> bool:
        """Free memory is below half of ``--memfree``: time to kill the youngest job."""
        if self.memfree is None:
            return False
        free = host.free_memory(self.meminfo)
        return free is not None and free < self.memfree / 2


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"
