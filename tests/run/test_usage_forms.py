"""Durations take the same units in every option, and a usage error names the option and
the form it expects (not argparse's ``invalid _positive_float value``)."""

from __future__ import annotations

import pytest

from helpers import run_cli


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ("--timeout", "abc"),
            "argument --timeout: 'abc' is not a duration: expected seconds (30, 1.5) or a "
            "duration such as 1.5s, 1m30s, 250ms",
        ),
        (
            ("--delay", "1m30x"),
            "argument --delay: '1m30x' is not a duration: expected seconds (30, 1.5) or a "
            "duration such as 1.5s, 1m30s, 250ms",
        ),
        (("--timeout", "0"), "argument --timeout: must be above 0, not 0"),
        (("--timeout", "-5"), "argument --timeout: must be above 0, not -5"),
        (("--wait-quiet", "0"), "argument --wait-quiet: must be above 0, not 0"),
        (("--wait-quiet", "-1"), "argument --wait-quiet: must be above 0, not -1"),
        (("--delay", "-1"), "argument --delay: must be 0 or more, not -1"),
        (("--delay", "-1m"), "argument --delay: must be 0 or more, not -1m"),
        (("--repeat", "-1"), "argument --repeat: must be at least 1, not -1"),
        (("--repeat", "x"), "argument --repeat: 'x' is not a whole number"),
        (("--retries", "-2"), "argument --retries: must be 0 or more, not -2"),
        (("--cpus-per-job", "-1"), "argument --cpus-per-job: must be at least 1, not -1"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_usage_errors_name_the_option_and_the_form(args: tuple[str, ...], reason: str) -> None:
    proc = run_cli("run", *args, "--dry-run", "echo", ":::", "a")
    assert proc.returncode == 255, proc.stderr
    assert proc.stderr.splitlines()[0] == f"pipepool run: error: {reason}", proc.stderr


@pytest.mark.parametrize("value", ["1.5s", "1m30s", "250ms", "90", "1.5"])
def test_timeout_and_delay_take_the_same_durations(value: str) -> None:
    for option in ("--timeout", "--delay"):
        proc = run_cli("run", option, value, "--dry-run", "echo", ":::", "a")
        assert proc.returncode == 0 and proc.stdout == "echo a\n", (option, proc.stderr)


def test_a_timeout_in_milliseconds_ends_the_job() -> None:
    """``--timeout 300ms`` is 0.3 s, not 300 s (the run would hang the test's bound)."""
    proc = run_cli("run", "--timeout", "300ms", "sleep", ":::", "30", timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "timed out" in proc.stderr, proc.stderr
