"""``DeathCause``: why a worker died, a public ``StrEnum`` that ``WorkerLostError.cause``
carries and the faces compare against. It stays the plain string it was before: equal
to it, printed and written to JSON as it, found under it in a dict, pickled and loaded
in a process that never touched it."""

from __future__ import annotations

import json
import pickle
import signal
import subprocess
import sys

import pytest

import pipepool
from pipepool.errors import DeathCause, WorkerLostError
from pipepool.executor import _death

pytestmark = pytest.mark.timeout(60)

CAUSES = {"OOM": "oom", "CRASH": "crash", "SIGNAL": "signal", "EXIT": "exit", "UNKNOWN": ""}


def test_it_is_public_and_its_members_are_the_strings():
    assert "DeathCause" in pipepool.__all__
    assert pipepool.DeathCause is DeathCause
    assert {m.name: m.value for m in DeathCause} == CAUSES
    for member in DeathCause:
        value = CAUSES[member.name]
        assert isinstance(member, str)
        assert member == value and str(member) == value and f"{member}" == value
        assert json.dumps({"cause": member}) == json.dumps({"cause": value})
        assert {value: 1}[member] == 1 and {member: 1}[value] == 1
    assert not DeathCause.UNKNOWN and all(m for m in DeathCause if m is not DeathCause.UNKNOWN)


def test_a_lost_worker_error_carries_a_member():
    assert WorkerLostError("lost", pid=1, exitcode=-9).cause is DeathCause.UNKNOWN
    error = WorkerLostError("lost", pid=1, exitcode=-9, cause=DeathCause.OOM)
    assert error.cause is DeathCause.OOM and error.cause == "oom"
    # Untyped code that passes the plain string (as before) gets the member all the same.
    error = WorkerLostError("lost", pid=1, exitcode=-11, cause="crash")
    assert error.cause is DeathCause.CRASH
    with pytest.raises(ValueError):
        WorkerLostError("lost", pid=1, exitcode=-9, cause="eaten by a grue")


def test_it_pickles_by_its_public_name_and_loads_where_nothing_loaded_it():
    error = WorkerLostError("lost", pid=7, exitcode=-9, cause=DeathCause.OOM)
    member = pickle.dumps(DeathCause.OOM)  # by the name users know, not the private home
    assert b"pipepool.errors" in member and b"_broken_pool" not in member
    data = pickle.dumps(error)
    again = pickle.loads(data)
    assert (again.pid, again.exitcode, again.cause) == (7, -9, DeathCause.OOM)
    code = (
        "import pickle, sys\n"
        "error = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(error.cause).__name__, error.cause == 'oom', error.pid)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, timeout=30, check=True
    ).stdout
    assert out.decode().split() == ["DeathCause", "True", "7"]


@pytest.mark.parametrize(
    ("exitcode", "kwargs", "cause"),
    [
        (-signal.SIGKILL, {"oom_rise": "oom_kill 3 -> 4"}, DeathCause.OOM),
        (-signal.SIGSEGV, {"crash_report": "\nFatal Python error"}, DeathCause.CRASH),
        (-signal.SIGKILL, {}, DeathCause.SIGNAL),
        (-signal.SIGKILL, {"oom_counted": False}, DeathCause.SIGNAL),
        (-signal.SIGSEGV, {}, DeathCause.SIGNAL),
        (-signal.SIGTERM, {}, DeathCause.SIGNAL),
        (None, {}, DeathCause.SIGNAL),
        (3, {}, DeathCause.EXIT),
    ],
)
def test_the_executor_names_each_death_with_a_member(exitcode, kwargs, cause):
    got, message = _death.describe(42, exitcode, "'key'", **kwargs)
    assert got is cause and "worker pid 42" in message


def test_the_joblib_face_words_each_cause_by_its_member():
    from pipepool.joblib import _crash as face

    assert all(type(cause) is DeathCause for cause in face.CAUSE_SAID)
    assert set(face.CAUSE_SAID) == set(DeathCause) - {DeathCause.UNKNOWN}
    lost = WorkerLostError("lost", pid=5, exitcode=-9, cause=DeathCause.OOM)
    crashed = face._crashed(lost, None)
    assert crashed.cause is DeathCause.OOM
    assert face.CAUSE_SAID[DeathCause.OOM] in str(crashed)
