"""The targets: each a ratio of two medians of one run (or of one median and a fixed
number), held to a goal; a target against several peers is held to the best of them
(those measured: a peer that is not installed, or absent here, is not counted)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .config import START_METHODS, Config
from .contenders import COPY_BOUND, MAP_FLOOR


def median_of(
    data: dict[str, Any], measure: str, param: str, key: str, field_name: str | None = None
) -> float | None:
    m = data["measures"].get(measure)
    if m is None:
        return None
    entry = m["params"].get(param, {}).get(key)
    if not entry or "median" not in entry:
        return None
    return entry["median"].get(field_name or m["field"])


@dataclass(frozen=True)
class Target:
    """One target: the median of ``ours`` over that of ``peer`` (or over a fixed number,
    ``absolute``: a Config field) in ``measure`` at ``param``, held to ``goal bound``.

    ``name``, ``param``, ``ours`` and ``peer`` are format strings over the parameters of
    the row's group (``TARGETS``): ``p``, ``method``, ``state``, ``who``, ``key``, and
    ``local`` (the LocalExecutor variant this run chose) and the Config's fields.
    """

    name: str
    measure: str
    param: str
    ours: str
    peer: str
    goal: str  # ">=" or "<="
    bound: float
    field: str | None = None  # the measure's own primary field if None
    absolute: str | None = None  # a Config field to compare with instead of a peer
    if_measured: bool = False  # no row where ``ours`` was not measured (an optional key)
    over: str | None = None  # a contender whose median is subtracted from both first:
    # the ratio of the overheads above it (joblib's sequential backend)
    beyond: tuple[str, str, str] | None = None  # with ``absolute``: ours minus this key,
    # minus (the second minus the third), against the bound (what wait(fs) adds per
    # future over result(), beyond what the stdlib's wait() adds on bare Futures)


WAIT_OURS = "ppe-submit-wait"  # the wait(fs) row: ours, then what ``beyond`` subtracts
WAIT_BEYOND = ("ppe-submit", "bare-wait", "bare-result")


def beyond_value(ours: float, sub: float, bare_wait: float, bare_result: float) -> float:
    """A ``beyond`` row's value: ours over ``sub``, less what the stdlib's wait() adds
    on bare Futures (``bare_wait`` over ``bare_result``)."""
    return (ours - sub) - (bare_wait - bare_result)


# The peers' own ways to run one item at a time (issue 44: pipepool's >= 5x every one).
ONE_CALL_PEERS = (
    "std-submit,mp-apply,loky-submit,mpire-apply,pebble-schedule,zoo-submit,interp-submit"
)
MAP1_PEERS = "mp-map1,mp-imap1,mpire-map1,pebble-map1,std-map1,zoo-map,interp-map1"
CHUNKED_PEERS = (
    "mp-chunks,mp-map-default,mpire-chunks,mpire-map-default,loky-chunks,pebble-chunks,std-chunks"
)

# The targets (issues 6, 13, 25, 32, 41, 42, 44), in report order: each group's targets
# are evaluated for every value of its parameters (``target_params``), the group's rows
# alternating per value. One goal per quantity (a measure's field of one contender at
# one parameter), whatever the peer: tests/project/test_benchmarks_targets.py holds it.
TARGETS: tuple[tuple[str, tuple[Target, ...]], ...] = (
    (
        "each p",  # issues 13, 44: what a scheduler copying the README gets
        (
            Target(
                "scheduler rounds: default LocalExecutor, sync() rounds, tiny tasks, p={p}",
                "tiny", "{p}", "local-default-sync", "airflow", ">=", 2, if_measured=True,
            ),
        ),
    ),
    (
        "p=2",
        (Target("LocalExecutor tiny tasks, p={p}", "tiny", "{p}", "{local}", "airflow", ">=", 2),),
    ),
    (
        "each p",  # issue 44: one item at a time, >= 5x every peer measured
        (
            Target(
                "ProcessPoolExecutor submit+result vs the best peer's one call at a time, p={p}",
                "tiny", "{p}", "ppe-submit", ONE_CALL_PEERS, ">=", 5,
            ),
            Target(
                "ProcessPoolExecutor.map chunksize 1 vs the best peer's, p={p}",
                "tiny", "{p}", "ppe-map1", MAP1_PEERS, ">=", 5,
            ),
            Target(
                "ProcessPoolExecutor submit, then wait(fs), p={p}",
                "tiny", "{p}", "ppe-submit-wait", "std-submit-wait", ">=", 10,
                if_measured=True,
            ),
            Target(
                "CPU wait(fs) adds per future over result(), beyond the stdlib's wait() on "
                "bare Futures (µs), p={p}",
                "tiny", "{p}", WAIT_OURS, "{wait_cpu_us:g} µs", "<=", 1,
                "parent_cpu_us", absolute="wait_cpu_us", if_measured=True,
                beyond=WAIT_BEYOND,
            ),
        ),
    ),
    (
        "p=2",  # issues 32, 44: the chunked map, where most users start
        (
            Target(
                "chunked map of {map_items:,} tiny calls: ahead of the best peer",
                "map", "2", "ppe-chunks", CHUNKED_PEERS, ">=", 1, if_measured=True,
            ),
            Target(
                "chunked map, parent CPU per item vs the serialization floor",
                "map", "2", "ppe-chunks", MAP_FLOOR, "<=", 1.5, "parent_cpu_us",
                if_measured=True,
            ),
            Target(
                "per-task timeouts, a burst of {timeout_tasks}: with_options(timeout=) vs "
                "pebble's schedule(timeout=)",
                "timeouts", "2", "ppe-submit", "pebble-schedule", "<=", 1, if_measured=True,
            ),
        ),
    ),
    (
        "each p",
        (
            Target(
                "round-trip latency p50, p={p}",
                "latency", "{p}", "ppe-submit", "std-submit", "<=", 0.4, "p50_us",
            ),
            Target(
                "round-trip latency p99, p={p}",  # issue 25: p50 and p99 at most 0.4x
                "latency", "{p}", "ppe-submit", "std-submit", "<=", 0.4, "p99_us",
            ),
        ),
    ),
    (
        "each p",  # issue 42: a share of one copy into fresh pages, measured in the run
        (
            Target(
                "1 MiB results vs the copy bound, p={p}",
                "mib", "{p}", "ppe-submit", COPY_BOUND, ">=", 0.65,
            ),
        ),
    ),
    (
        "each p",  # issue 25: CPU time, which load barely moves
        (
            Target(
                "parent CPU per task, LocalExecutor vs the Airflow-style pair, p={p}",
                "tiny", "{p}", "{local}", "airflow", "<=", 0.4, "parent_cpu_us",
            ),
            Target(
                "parent CPU per task, ProcessPoolExecutor vs LocalExecutor, p={p}",
                "tiny", "{p}", "ppe-submit", "{local}", "<=", 1.5, "parent_cpu_us",
            ),
            Target(
                "worker CPU per task, LocalExecutor vs the Airflow-style pair, p={p}",
                "tiny", "{p}", "{local}", "airflow", "<=", 0.4, "worker_cpu_us",
            ),
        ),
    ),
    (
        "joblib",
        (
            Target(
                "joblib overhead above its sequential backend, {tiny_tasks:,} calls, n_jobs=2",
                "joblib-tiny", "2", "joblib-pipepool", "joblib-loky", "<=", 0.5, "seconds",
                over="joblib-sequential",
            ),
        ),
    ),
    (
        "p=2",  # issue 26: joblib's numpy arrays, each way, at least as fast as loky's
        (
            Target(
                "joblib 1 MiB numpy results vs loky",
                "joblib-mib", "2", "joblib-pipepool", "joblib-loky", ">=", 1, if_measured=True,
            ),
            Target(
                "joblib {array_mb} MB numpy results vs loky",
                "joblib-arrays", "2", "joblib-pipepool", "joblib-loky", ">=", 1,
                if_measured=True,
            ),
            Target(
                "joblib {array_mb} MB numpy arguments (memmapped) vs loky",
                "joblib-arrays", "2", "joblib-pipepool", "joblib-loky", ">=", 1, "args_mb_s",
                if_measured=True,
            ),
        ),
    ),
    (
        "each method and p",
        (
            Target(
                "start-up + first task, {method}, p={p}",
                "startup", "{method}:{p}", "ppe-submit", "std-submit", "<=", 1,
            ),
        ),
    ),
    (
        "each method",  # issue 44: a pool made, used a little and shut down
        (
            Target(
                "short-lived pool: made, map of {life_calls} calls, shut down, {method}",
                "startup-map", "{method}:2", "ppe-map1", "std-map1", "<=", 1,
                if_measured=True,
            ),
        ),
    ),
    (
        "spawn and forkserver",  # issue 44: imports paid once
        (
            Target(
                "recycle gap with a heavy import (max_tasks_per_child=1), {method}",
                "recycle", "{method}", "ppe-recycle", "std-recycle", "<=", 0.5,
                if_measured=True,
            ),
        ),
    ),
    (
        "p=2",  # issue 41: an idle parent waits without polling
        (
            Target(
                "idle wake-ups per second, tasks running, waited on with result()",
                "idle", "2", "ppe-submit", "std-submit", "<=", 1, if_measured=True,
            ),
            Target(
                "idle wake-ups per second, tasks running, waited on with wait(fs)",
                "idle", "2", "ppe-submit-wait", "std-submit-wait", "<=", 1, if_measured=True,
            ),
        ),
    ),
    (
        "each state and executor",
        (
            Target(
                "long tasks, no head-of-line blocking: {who}, {state} pool",
                "hol", "{state}:{hol_workers}", "{key}", "the long task ({hol_long:g} s)",
                "<=", 0.2, absolute="hol_long",
            ),
        ),
    ),
)  # fmt: skip


def target_params(group: str, cfg: Config, local: str) -> list[dict[str, Any]]:
    """The values a group of ``TARGETS`` is evaluated for, in report order (``local``:
    the key of the LocalExecutor variant this run chose)."""
    ps = [str(p) for p in cfg.parallelism]
    if group == "each p":
        return [{"p": p} for p in ps]
    if group == "p=2":
        return [{"p": "2" if "2" in ps else ps[0]}]
    if group == "joblib":
        return [{}]
    methods = [m for m in START_METHODS if m in cfg.methods]
    if group == "each method and p":
        return [{"method": m, "p": p} for m in methods for p in ps]
    if group == "each method":
        return [{"method": m} for m in methods]
    if group == "spawn and forkserver":
        return [{"method": m} for m in methods if m != "fork"]
    if group == "each state and executor":
        return [
            {"state": state, "key": key, "who": who}
            for state in ("cold", "warm")
            for key, who in (("ppe-submit", "ProcessPoolExecutor"), (local, "LocalExecutor"))
        ]
    raise ValueError(f"unknown group of targets {group!r}")


def best_peer(
    data: dict[str, Any], t: Target, param: str, keys: list[str]
) -> tuple[str, float | None]:
    """``(key, median)`` of the best of ``keys`` measured in this run: the highest for a
    ``>=`` goal (the peer hardest to beat), the lowest for ``<=``."""
    found = [(m, k) for k in keys if (m := median_of(data, t.measure, param, k, t.field))]
    if not found:
        return keys[0], None
    value, key = (max if t.goal == ">=" else min)(found)
    return key, value


def evaluate_targets(data: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    """The rows of ``TARGETS``, each a ratio of two medians measured in this run."""
    local = data["local_choice"]["key"]
    rows: list[dict[str, Any]] = []
    for group, targets in TARGETS:
        for params in target_params(group, cfg, local):
            env = {**dataclasses.asdict(cfg), **params, "local": local}
            for t in targets:
                param, ours, peer = (s.format(**env) for s in (t.param, t.ours, t.peer))
                measured = data["measures"].get(t.measure, {}).get("params", {}).get(param, {})
                if t.if_measured and ours not in measured:
                    continue
                a = median_of(data, t.measure, param, ours, t.field)
                if "," in peer and not t.absolute:  # the best of several peers
                    peer, b = best_peer(data, t, param, peer.split(","))
                else:
                    b = (
                        env[t.absolute]
                        if t.absolute
                        else median_of(data, t.measure, param, peer, t.field)
                    )
                if t.beyond and a is not None:
                    sub, bare_wait, bare_result = (
                        median_of(data, t.measure, param, k, t.field) for k in t.beyond
                    )
                    if sub is None or bare_wait is None or bare_result is None:
                        a = None
                    else:
                        a = beyond_value(a, sub, bare_wait, bare_result)
                base = median_of(data, t.measure, param, t.over, t.field) if t.over else None
                if t.over and (base is None or a is None or b is None):
                    a = b = None  # an overhead needs all three medians
                elif base is not None and a is not None and b is not None:
                    a, b = a - base, b - base
                # A peer at or below the baseline has no overhead to compare with: n/a.
                ratio = a / b if a is not None and b is not None and b > 0 else None
                met = (
                    None
                    if ratio is None
                    else (ratio >= t.bound if t.goal == ">=" else ratio <= t.bound)
                )
                rows.append(
                    {
                        "target": t.name.format(**env),
                        "measure": t.measure,
                        "param": param,
                        "ours": ours,
                        "peer": peer,
                        "ours_value": a,
                        "peer_value": b,
                        "ratio": ratio,
                        "goal": f"{t.goal} {t.bound:g}x",
                        "met": met,
                        "field": t.field or data["measures"].get(t.measure, {}).get("field"),
                        "over": t.over,
                        "over_value": base,
                        # ours less these medians: a difference, which noise can put at
                        # or below zero (a ratio <= 0 then, and the goal met)
                        "beyond": list(t.beyond) if t.beyond else None,
                    }
                )
    return rows
