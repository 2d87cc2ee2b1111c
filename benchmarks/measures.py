"""The suite's measures: one sample of each (a fresh pool per sample), the interleaved
rounds that run them (``Suite``), and their medians (``summarize``)."""

from __future__ import annotations

import dataclasses
import faulthandler
import gc
import importlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from . import _cpu, _noise
from ._calls import CallCounter
from ._stats import percentile
from .config import MEASURE_INFO, Config
from .contenders import (
    COPY_BOUND,
    MAP_CHUNK,
    MAP_FLOOR,
    NO_ADAPTIVE,
    PIPEPOOL,
    SPECS,
    Adapter,
    Spec,
    local_adaptive_prefetch,
    local_rounds_spec,
    local_spec,
    missing_requirement,
)
from .tasks import KIB64, MIB, make_mib, noop, sleep_s, take


class SampleError(Exception):
    """A sample whose results were wrong (a contender that lost or changed results)."""


# -- samples ---------------------------------------------------------------------------------


def _open(spec: Spec, parallelism: int, method: str | None = None, warm: bool = True) -> Adapter:
    adapter = spec.make(parallelism, method)
    if warm:
        try:
            # Enough work that every worker is up (some pools start them on demand).
            adapter.run(noop, list(range(adapter.warm_items(parallelism))))
        except BaseException:
            adapter.abort()
            raise
    return adapter


def throughput_sample(
    spec: Spec,
    parallelism: int,
    fn: Callable[[Any], Any],
    args: list[Any],
    check: Callable[[list[Any]], bool],
    nbytes: int = 0,
) -> dict[str, float]:
    """One timed ``run`` on a fresh, warm pool: rate, MB/s, parent and worker CPU."""
    adapter = _open(spec, parallelism)
    try:
        gc.collect()
        pids = adapter.pids()
        workers_before = _cpu.snapshot(pids)
        parent_before = _cpu.parent_seconds()
        started = time.perf_counter()
        results = adapter.run(fn, args)
        elapsed = time.perf_counter() - started
        parent_used = _cpu.parent_seconds() - parent_before
        workers_used = _cpu.used_since(
            workers_before, _cpu.snapshot(sorted(set(pids) | set(adapter.pids())))
        )
        if not check(results):
            raise SampleError(f"{spec.label}: wrong results")
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    n = len(args)
    out = {
        "seconds": elapsed,
        "rate": n / elapsed,
        "parent_cpu_us": parent_used / n * 1e6,
        "worker_cpu_us": workers_used / n * 1e6,
    }
    if nbytes:
        out["mb_s"] = nbytes * n / elapsed / 1e6
    return out


def calls_sample(
    spec: Spec, parallelism: int, args: list[Any], check: Callable[[list[Any]], bool]
) -> dict[str, float]:
    """Python-level and builtin calls per task in the parent (all its threads), over one
    ``run`` on a fresh, warm pool. The profile function is in place before the pool
    exists, so the threads the pool starts count too; it counts only during the run."""
    counter = CallCounter()
    counter.install()
    try:
        adapter = _open(spec, parallelism)
        try:
            counter.on = True
            results = adapter.run(noop, args)
            counter.on = False
            if not check(results):
                raise SampleError(f"{spec.label}: wrong results")
        except BaseException:
            counter.on = False
            adapter.abort()
            raise
        adapter.close()
    finally:
        counter.uninstall()
    n = len(args)
    return {"py_calls": counter.py_calls / n, "c_calls": counter.c_calls / n}


def latency_sample(spec: Spec, parallelism: int, calls: int) -> dict[str, Any]:
    adapter = _open(spec, parallelism)
    try:
        for i in range(min(50, calls)):
            adapter.call(noop, i)
        gc.collect()
        times = []
        clock = time.perf_counter_ns
        call = adapter.call
        for i in range(calls):
            started = clock()
            if call(noop, i) != i:
                raise SampleError(f"{spec.label}: wrong result")
            times.append((clock() - started) / 1000)
    except BaseException:
        adapter.abort()
        raise
    adapter.close()
    return {
        "p50_us": percentile(times, 50),
        "p99_us": percentile(times, 99),
        "mean_us": statistics.fmean(times),
        "_times": times,
    }


STARTUP_SETTLE = 0.02  # s of quiet before a start-up sample: the previous pool's workers
# have been joined, but the kernel may still be tearing their memory down


def startup_sample(spec: Spec, parallelism: int, method: str) -> dict[str, float]:
    gc.collect()
    time.sleep(STARTUP_SETTLE)
    started = time.perf_counter()
    adapter = _open(spec, parallelism, method, warm=False)
    try:
        if adapter.call(noop, 7) != 7:
            raise SampleError(f"{spec.label}: wrong result")
        elapsed = time.perf_counter() - started
    except BaseException:
        adapter.abort()
        raise
    closing = time.perf_counter()
    adapter.close()
    return {"ms": elapsed * 1e3, "close_ms": (time.perf_counter() - closing) * 1e3}


def timeouts_sample(spec: Spec, parallelism: int, cfg: Config) -> dict[str, float]:
    """A burst of tasks that all overrun their per-task timeout, on a warm pool."""
    adapter = _open(spec, parallelism)
    try:
        seconds = adapter.timeouts(cfg.timeout_tasks, cfg.timeout_limit, cfg.timeout_sleep)
    except BaseException:
        adapter.abort()
        raise
    adapter.abort()  # killed workers may still be replaced: do not wait on them
    return {"seconds": seconds}


def hol_sample(spec: Spec, cfg: Config, warm: bool) -> dict[str, float]:
    """Warm: the pool ran no-ops first (so an adaptive depth has seen tiny tasks, as in a
    pool that has been in use); cold: the long task is the pool's first."""
    adapter = _open(spec, cfg.hol_workers, warm=warm)
    try:
        seconds = adapter.shorts_done(cfg.hol_long, cfg.hol_short, cfg.hol_count)
    finally:
        adapter.abort()  # do not wait out the long task
    return {"seconds": seconds}


CANCEL_BATCH = 8  # futures per cancel sample: one runs, the last is cancelled behind it
CANCEL_NAP = 0.001  # s each of them runs: short enough that the revoke trap (an overrun
# of 4x the task time) leaves the ones behind on the worker, long enough to be behind


def cancel_sample(calls: int) -> dict[str, float]:
    """``Future.cancel()`` of a future handed to the pool behind running work, timed
    ``calls`` times on one warm worker (pipepool only: the standard library cannot
    cancel what it handed to its call queue). Each time: ``CANCEL_BATCH`` naps
    submitted, the first one's result waited for, then the last one handed over and
    not started is cancelled (sent to the worker: claimed in shared memory with the
    compiled loop, asked by a CANCEL with the pure one; or taken back into the
    executor's queue: the paths are mixed, as in use). ``cancelled``: the share cancel()
    turned (the rest had started first); ``timed``: the share of calls that had one."""
    from pipepool import ProcessPoolExecutor

    pool = ProcessPoolExecutor(1)
    try:
        for _ in range(3):  # the adaptive depth grows: tasks go to the worker ahead
            list(pool.map(noop, range(2000)))
        gc.collect()
        times, cancelled = [], 0
        clock = time.perf_counter_ns
        for _ in range(calls):
            fs = [pool.submit(sleep_s, CANCEL_NAP) for _ in range(CANCEL_BATCH)]
            fs[0].result()
            handed = pool._driver.running  # handed to the LocalExecutor, not settled
            behind = [f for f in fs if f in handed and not f.running() and not f.done()]
            if behind:  # else all started or ended: nothing handed over to cancel
                target = behind[-1]
                started = clock()
                ok = target.cancel()
                times.append((clock() - started) / 1000)
                cancelled += ok
            for f in fs:
                if not f.cancelled():
                    f.result()
        if not times:
            raise SampleError("no future was handed over and not started when cancelled")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return {
        "p50_us": percentile(times, 50),
        "p99_us": percentile(times, 99),
        "mean_us": statistics.fmean(times),
        "cancelled": cancelled / len(times),
        "timed": len(times) / calls,
    }


# -- the run ---------------------------------------------------------------------------------


class Suite:
    """One run: its configuration, the samples of every measure (``measures``), the
    contenders met and the notes; ``interleave`` runs a measure's rounds.
    ``pipepool_only``: pipepool's own contenders alone (an A/B run of two checkouts)."""

    def __init__(
        self, cfg: Config, log: Callable[[str], None], pipepool_only: bool = False
    ) -> None:
        self.cfg = cfg
        self.log = log
        self.pipepool_only = pipepool_only
        self.notes: list[str] = []
        self.measures: dict[str, dict[str, Any]] = {}
        self.latency_times: dict[str, dict[str, list[float]]] = {}
        self.speed_probes: list[float] = []  # before each sample (_noise.speed_probe)
        self.contenders: dict[str, dict[str, str]] = {}
        self.skipped: set[str] = set()
        adaptive = local_adaptive_prefetch()
        self.adaptive_prefetch = adaptive is not NO_ADAPTIVE
        local = [local_spec(p) for p in cfg.prefetches]
        if self.adaptive_prefetch:
            # One setting for tiny and long tasks alike: the one to judge the design by.
            local.insert(0, local_spec(adaptive))
        self.local_specs = local
        if adaptive == "default":  # the defaults, driven the way the README shows
            self.local_specs = [local_rounds_spec(), *local]
        self.local: Spec = local[0]  # without an adaptive one: chosen after `tiny`
        self.local_why = (
            f"{local[0].label.split('(', 1)[1].rstrip(')')}: LocalExecutor's adaptive "
            "dispatch depth, used wherever one LocalExecutor row stands for pipepool "
            "(fixed depths are shown beside it in tiny and long tasks)"
            if self.adaptive_prefetch
            else f"prefetch {cfg.prefetches[0]}: `tiny` was not run to choose one"
        )
        for spec in [*local, *SPECS.values()]:
            note = missing_requirement(spec)
            if note:
                self.skipped.add(spec.key)
                if note not in self.notes:
                    self.notes.append(note)

    def specs(self, *keys: str) -> list[Spec]:
        """The contenders of these keys ("local": the chosen LocalExecutor) that run."""
        chosen = []
        for key in keys:
            spec = self.local if key == "local" else SPECS[key]
            if spec.key not in self.skipped and self.runs(spec):
                chosen.append(spec)
        return chosen

    def runs(self, spec: Spec) -> bool:
        """Whether this run measures ``spec`` (an A/B run measures pipepool alone), once
        it can run here (else it is skipped with ``missing_requirement``'s note)."""
        return spec.family == PIPEPOOL or not self.pipepool_only

    def run(self, measure: str) -> None:
        """Run one measure of the registry (``config.MEASURE_INFO[measure]["run"]``)."""
        where, name = MEASURE_INFO[measure]["run"].rsplit(".", 1)
        if where == "Suite":
            getattr(self, name)()
        else:
            getattr(importlib.import_module(f"{__package__}.{where}"), name)(self)

    def interleave(
        self,
        measure: str,
        params: list[Any],
        specs: list[Spec],
        rounds: int,
        sample: Callable[[Spec, Any], dict[str, Any]],
    ) -> None:
        """``rounds`` rounds; in each, every param, every contender (rotated per round).
        No contender (their packages all missing: the notes say so): no measure."""
        if not specs:
            return
        table = self.measures.setdefault(measure, {"params": {}})["params"]
        for spec in specs:
            self.contenders[spec.key] = {"label": spec.label, "family": spec.family}
        for r in range(rounds):
            for param in params:
                shift = r % len(specs)
                for spec in specs[shift:] + specs[:shift]:
                    samples = table.setdefault(_param_key(param), {}).setdefault(spec.key, [])
                    self.speed_probes.append(_noise.speed_probe())
                    faulthandler.dump_traceback_later(self.cfg.sample_timeout, exit=True)
                    try:
                        s = sample(spec, param)
                    except Exception as exc:  # one contender failing must not sink the run
                        s = {"error": f"{type(exc).__name__}: {exc}"}
                    finally:
                        faulthandler.cancel_dump_traceback_later()
                    times = s.pop("_times", None)
                    if times is not None:
                        self.latency_times.setdefault(_param_key(param), {}).setdefault(
                            spec.key, []
                        ).extend(times)
                    samples.append(s)
                    self.log(
                        f"{measure} round {r + 1}/{rounds} {_param_key(param)}: "
                        f"{spec.label}: {_brief(s)}"
                    )

    # -- each measure -------------------------------------------------------------------

    def run_tiny(self) -> None:
        cfg = self.cfg
        args = list(range(cfg.tiny_tasks))
        keys = [
            "ppe-submit",
            "ppe-submit-wait",
            "ppe-map1",
            "ppe-map-auto",
            "std-submit",
            "std-submit-wait",
            "bare-wait",
            "bare-result",
            "std-map1",
            "std-map-auto",
            "mp-imap1",
            "mp-map1",
            "mp-apply",
            "loky-submit",
            "mpire-map1",
            "mpire-apply",
            "pebble-map1",
            "pebble-schedule",
            "zoo-submit",
            "zoo-map",
            "interp-submit",
            "interp-map1",
            "airflow",
        ]
        specs = [s for s in self.local_specs if s.key not in self.skipped] + self.specs(*keys)
        self.interleave(
            "tiny",
            cfg.parallelism,
            specs,
            cfg.rounds,
            lambda s, p: throughput_sample(s, p, noop, args, lambda r: sorted(r) == args),
        )
        self.choose_local()

    def choose_local(self) -> None:
        """The LocalExecutor configuration every later measure uses (reported)."""
        if self.adaptive_prefetch:
            return
        params = self.measures["tiny"]["params"]
        p = "2" if "2" in params else next(iter(params))
        rates = {}
        for spec in self.local_specs:
            values = [s["rate"] for s in params[p].get(spec.key, []) if "rate" in s]
            if values:
                rates[spec.key] = statistics.median(values)
        if not rates:
            return
        best = max(rates, key=rates.__getitem__)
        self.local = next(s for s in self.local_specs if s.key == best)
        tried = ", ".join(
            f"{s.key[len('local-p') :]} ({rates.get(s.key, 0):,.0f} tasks/s)"
            for s in self.local_specs
        )
        self.local_why = (
            f"prefetch {best[len('local-p') :]}, the best median tasks/s in "
            f"`tiny` at p={p} of prefetch {tried} (LocalExecutor has no "
            "adaptive default yet)"
        )

    PAYLOAD_KEYS = (
        "local",
        "ppe-submit",
        "std-submit",
        "mp-apply",
        "mp-imap1",
        "loky-submit",
        "mpire-apply",
        "pebble-schedule",
        "airflow",
    )

    def run_mib(self) -> None:
        args = list(range(self.cfg.mib_tasks))
        self.interleave(
            "mib",
            self.cfg.parallelism,
            self.specs(*self.PAYLOAD_KEYS, COPY_BOUND),
            self.cfg.rounds,
            lambda s, p: throughput_sample(
                s,
                p,
                make_mib,
                args,
                lambda r: len(r) == len(args) and all(len(b) == MIB for b in r),
                nbytes=MIB,
            ),
        )

    def run_kib64(self) -> None:
        blob = bytes(KIB64)  # pickled anew for every call, as any argument is
        args = [blob] * self.cfg.kib_tasks
        self.interleave(
            "kib64",
            self.cfg.parallelism,
            self.specs(*self.PAYLOAD_KEYS),
            self.cfg.rounds,
            lambda s, p: throughput_sample(
                s, p, take, args, lambda r: r == [KIB64] * len(args), nbytes=KIB64
            ),
        )

    # One call at a time: every pool's own idiom (latency and start-up)
    ONE_KEYS = (
        "local",
        "ppe-submit",
        "std-submit",
        "mp-apply",
        "loky-submit",
        "mpire-apply",
        "pebble-schedule",
        "zoo-submit",
        "interp-submit",
        "airflow",
    )

    def run_latency(self) -> None:
        keys = self.ONE_KEYS
        self.interleave(
            "latency",
            self.cfg.parallelism,
            self.specs(*keys),
            self.cfg.rounds,
            lambda s, p: latency_sample(s, p, self.cfg.latency_calls),
        )

    def run_startup(self) -> None:
        keys = self.ONE_KEYS
        params = [(m, p) for m in self.cfg.methods for p in self.cfg.parallelism]
        self.interleave(
            "startup",
            params,
            self.specs(*keys),
            self.cfg.startup_rounds,
            lambda s, mp: startup_sample(s, mp[1], mp[0]),
        )

    COST_KEYS = ("local", "ppe-submit", "airflow", "std-submit")  # the cost-per-task rows

    def run_calls(self) -> None:
        args = list(range(self.cfg.tiny_tasks))
        self.interleave(
            "calls",
            self.cfg.parallelism,
            self.specs(*self.COST_KEYS),
            self.cfg.calls_rounds,
            lambda s, p: calls_sample(s, p, args, lambda r: sorted(r) == args),
        )

    def run_sweep(self) -> None:
        args = list(range(self.cfg.sweep_tasks))
        keys = [
            "local",
            "ppe-submit",
            "ppe-map1",
            "std-submit",
            "mp-imap1",
            "loky-submit",
            "airflow",
        ]
        self.interleave(
            "sweep",
            self.cfg.sweep,
            self.specs(*keys),
            self.cfg.sweep_rounds,
            lambda s, p: throughput_sample(s, p, noop, args, lambda r: sorted(r) == args),
        )

    MAP_FAMILIES = ("ppe", "mp", "mpire", "loky", "std", "pebble")

    def run_map(self) -> None:
        """One chunked map of many tiny calls at p=2: 10,000 per chunk for every pool,
        the automatic default of those that have one, and two iterables."""
        args = list(range(self.cfg.map_items))
        keys = [f"{f}-chunks" for f in self.MAP_FAMILIES]
        keys += ["mp-map-default", "mpire-map-default"]
        keys += [f"{f}-chunks2" for f in self.MAP_FAMILIES]
        keys.append(MAP_FLOOR)  # the parent's floor, held to in the targets
        self.interleave(
            "map",
            [2],
            self.specs(*keys),
            self.cfg.map_rounds,
            lambda s, p: throughput_sample(s, p, noop, args, lambda r: r == args),
        )

    def run_timeouts(self) -> None:
        """pipepool's with_options(timeout=) against pebble's and mpire's per-task
        timeouts, under a burst of tasks that all time out."""
        self.interleave(
            "timeouts",
            [2],
            self.specs("ppe-submit", "pebble-schedule", "mpire-apply"),
            self.cfg.rounds,
            lambda s, p: timeouts_sample(s, p, self.cfg),
        )

    def run_cancel(self) -> None:
        """Future.cancel() of a future handed over and not started (pipepool's only)."""
        self.interleave(
            "cancel",
            [1],
            self.specs("ppe-submit"),
            self.cfg.rounds,
            lambda s, p: cancel_sample(self.cfg.cancel_calls),
        )

    def run_hol(self) -> None:
        specs = [s for s in self.local_specs if s.key not in self.skipped] + self.specs(
            "ppe-submit", "std-submit", "mp-imap1", "mp-apply", "loky-submit", "airflow"
        )
        self.interleave(
            "hol",
            [("cold", self.cfg.hol_workers), ("warm", self.cfg.hol_workers)],
            specs,
            self.cfg.hol_rounds,
            lambda s, param: hol_sample(s, self.cfg, param[0] == "warm"),
        )


def _param_key(param: Any) -> str:
    if isinstance(param, tuple):
        return f"{param[0]}:{param[1]}"
    return str(param)


def _brief(sample: dict[str, Any]) -> str:
    if "error" in sample:
        return "ERROR " + sample["error"]
    return ", ".join(f"{k} {v:,.4g}" for k, v in sample.items() if not k.startswith("_"))


# -- summary ---------------------------------------------------------------------------------


def summarize(suite: Suite, cfg: Config) -> None:
    """Medians (and min/max of the primary field) of every measure/param/contender."""
    fields = dataclasses.asdict(cfg)
    for measure, data in suite.measures.items():
        info = MEASURE_INFO[measure]
        data.update({k: v for k, v in info.items() if k not in ("run", "n", "columns")})
        data["title"] = info["title"].format(
            **fields,
            n=fields[info["n"]] if info["n"] else 1,
            chunk=MAP_CHUNK,
            batch=CANCEL_BATCH,
            nap=CANCEL_NAP * 1e3,
        )
        if "columns" in info:
            data["columns"] = info["columns"]
        for by_key in data["params"].values():
            for key, samples in list(by_key.items()):
                good = [s for s in samples if "error" not in s]
                entry: dict[str, Any] = {"samples": samples, "ok": len(good)}
                if good:
                    names = [k for k in good[0] if not k.startswith("_")]
                    entry["median"] = {f: statistics.median(s[f] for s in good) for f in names}
                    primary = [s[info["field"]] for s in good]
                    entry["min"], entry["max"] = min(primary), max(primary)
                errors = sorted({s["error"] for s in samples if "error" in s})
                if errors:
                    entry["errors"] = errors
                by_key[key] = entry


def latency_cdf(suite: Suite) -> dict[str, dict[str, list[list[float]]]]:
    """Pooled round-trip times as (percentile, µs) points: what the latency plot draws."""
    points = [*range(0, 100), 99.5, 99.9, 100]
    return {
        param: {
            key: [[q, percentile(times, q) if q else min(times)] for q in points]
            for key, times in by_key.items()
            if times
        }
        for param, by_key in suite.latency_times.items()
    }
