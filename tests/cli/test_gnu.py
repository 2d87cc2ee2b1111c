"""GNU parallel's options in ``pipepool run``: one test per option, each expecting the
output GNU parallel's documentation gives for the same input. ``DOC`` names the example
followed: ``tutorial`` is ``man parallel_tutorial`` and ``man`` is ``man parallel``
(GNU parallel 20221122). Where the documentation says "the order may be different", the
test runs with ``-k`` (or compares sorted lines). GNU parallel itself is not needed.

Output that depends on when jobs run (``--line-buffer``, ``--ungroup``) is made
deterministic with gates: a job waits for a file the test creates once it has read
what must come first from the runner's stdout.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from helpers import joblog_rows, run_cli, start_cli
from pipepool._cli_common import default_jobs

pytestmark = pytest.mark.portable

# --load and --memfree read /proc (stat, meminfo); elsewhere they are refused before
# anything runs, which test_portable.py checks.
needs_proc = pytest.mark.skipif(not os.path.isdir("/proc"), reason="--load/--memfree read /proc")


def lines(*args: str, input: str | None = None) -> list[str]:
    proc = run_cli("run", "--no-summary", *args, input=input)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_link() -> None:
    # DOC tutorial "Linking arguments from input sources": parallel --link echo ::: A B C ::: D E F
    assert lines("-k", "--link", "echo", ":::", "A", "B", "C", ":::", "D", "E", "F") == [
        "A D",
        "B E",
        "C F",
    ]
    # DOC tutorial: "If one of the input sources is too short, its values will wrap"
    out = lines("-k", "--link", "echo", ":::", *"ABCDE", ":::", "F", "G")
    assert out == ["A F", "B G", "C F", "D G", "E F"]
    # DOC man --link: parallel --link echo {1} {2} {3} ::: 1 2 ::: I II III ::: a b c d e f g
    out = lines(
        "-k",
        "--link",
        "echo {1} {2} {3}",
        ":::",
        "1",
        "2",
        ":::",
        "I",
        "II",
        "III",
        ":::",
        *"abcdefg",
    )
    assert out == ["1 I a", "2 II b", "1 III c", "2 I d", "1 II e", "2 III f", "1 I g"]


def test_linked_sources(tmp_path: Path) -> None:
    abc, def_ = tmp_path / "abc-file", tmp_path / "def-file"
    abc.write_text("A\nB\nC\n")  # DOC tutorial input files: parallel -k echo ::: A B C > abc-file
    def_.write_text("D\nE\nF\n")
    # DOC tutorial: parallel echo :::: abc-file :::+ G H I :::: def-file
    out = lines("-k", "echo", "::::", str(abc), ":::+", "G", "H", "I", "::::", str(def_))
    assert out == ["A G D", "A G E", "A G F", "B H D", "B H E", "B H F", "C I D", "C I E", "C I F"]
    # DOC tutorial: parallel echo :::: abc-file ::: G H I ::::+ def-file
    out = lines("-k", "echo", "::::", str(abc), ":::", "G", "H", "I", "::::+", str(def_))
    assert out == ["A G D", "A H E", "A I F", "B G D", "B H E", "B I F", "C G D", "C H E", "C I F"]
    # DOC man ":::: argfiles": "Another way to write --arg-file argfile1 --arg-file
    # argfile2"; -a sources come before the ::: ones
    out = lines("-k", "-a", str(abc), "-a", str(def_), "echo")
    assert out == lines("-k", "echo", "::::", str(abc), "::::", str(def_))
    assert out[:3] == ["A D", "A E", "A F"] and len(out) == 9
    assert lines("-k", "-a", str(abc), "echo", ":::", "1") == ["A 1", "B 1", "C 1"]
    # DOC tutorial: "If one of the input sources is too short when using :::+ or ::::+,
    # the rest will be ignored": parallel echo ::: A B C D E :::+ F G
    assert lines("-k", "echo", ":::", *"ABCDE", ":::+", "F", "G") == ["A F", "B G"]


def test_colsep(tmp_path: Path) -> None:
    tsv = tmp_path / "tsv-file.tsv"
    tsv.write_text("f1\tf2\nA\tB\nC\tD\n")  # DOC tutorial input file tsv-file.tsv
    # DOC tutorial "Input from columns": parallel --colsep '\t' echo 1={1} 2={2} :::: tsv-file.tsv
    out = lines("-k", "--colsep", "\t", "echo 1={1} 2={2}", "::::", str(tsv))
    assert out == ["1=f1 2=f2", "1=A 2=B", "1=C 2=D"]
    # DOC man --colsep: parallel --colsep '-' echo {4} {3} {2} {1} ::: A-B C-D ::: e-f g-h
    # ("each input source will be separated, but the columns ... linked")
    out = lines(
        "-k", "--colsep", "-", "echo {4} {3} {2} {1}", ":::", "A-B", "C-D", ":::", "e-f", "g-h"
    )
    assert out == ["f e B A", "h g B A", "f e D C", "h g D C"]
    # DOC man --colsep: "--colsep implies --trim rl"; the separator is a regexp; a
    # missing column is empty (as GNU parallel 20221122 prints it)
    assert lines("-k", "--colsep", r",\s*", "echo [{1}] [{2}]", input="a ,  b\nc\n") == [
        "[a] [b]",
        "[c] []",
    ]


def test_max_args() -> None:
    # DOC tutorial: parallel -N3 echo ::: A B C D E F G H
    assert lines("-k", "-N3", "echo", ":::", *"ABCDEFGH") == ["A B C", "D E F", "G H"]
    # DOC tutorial: "-N also sets the positional replacement strings"
    out = lines("-k", "-N3", "echo 1={1} 2={2} 3={3}", ":::", *"ABCDEFGH")
    assert out == ["1=A 2=B 3=C", "1=D 2=E 3=F", "1=G 2=H 3="]
    # DOC tutorial: "-N0 reads 1 argument but inserts none": parallel -N0 echo foo ::: 1 2 3
    assert lines("-k", "-N0", "echo", "foo", ":::", "1", "2", "3") == ["foo"] * 3
    # DOC man --max-args: "-n max-args" is the same count
    assert lines("-k", "--max-args", "2", "echo", ":::", *"ABC") == ["A B", "C"]


def test_tagstring() -> None:
    # DOC tutorial: parallel --tagstring {}-bar echo foo-{} ::: A B C
    out = lines("-k", "--tagstring", "{}-bar", "echo foo-{}", ":::", "A", "B", "C")
    assert out == ["A-bar\tfoo-A", "B-bar\tfoo-B", "C-bar\tfoo-C"]
    # DOC man --tagstring: "str can contain replacement strings such as {}"; {#} too
    assert lines("-k", "--tagstring", "{#}:{1}", "echo", ":::", "x", "y") == ["1:x\tx", "2:y\ty"]


def test_dry_run(tmp_path: Path) -> None:
    # DOC tutorial: parallel --dryrun echo {} ::: A B C
    assert lines("--dryrun", "echo {}", ":::", "A", "B", "C") == ["echo A", "echo B", "echo C"]
    # DOC man --dry-run: "Print the job to run on stdout, but do not run the job"
    made = tmp_path / "made"
    out = lines("--dry-run", f"touch {made}/{{}}", ":::", "a b")
    assert out == [f"touch {made}/'a b'"]  # quoted as it would run
    assert not made.exists()


def test_null_and_delimiter(tmp_path: Path) -> None:
    abc0 = tmp_path / "abc0-file"
    abc0.write_bytes(b"A\0B\0C\0")  # DOC tutorial input file abc0-file
    abc_ = tmp_path / "abc_-file"
    abc_.write_bytes(b"A_B_C_")  # DOC tutorial input file abc_-file
    # DOC tutorial "Changing the argument delimiter": parallel -0 echo :::: abc0-file,
    # parallel -d '\0' echo :::: abc0-file and parallel -d _ echo :::: abc_-file
    assert lines("-k", "-0", "echo", "::::", str(abc0)) == ["A", "B", "C"]
    assert lines("-k", "-d", r"\0", "echo", "::::", str(abc0)) == ["A", "B", "C"]
    assert lines("-k", "-d", "_", "echo", "::::", str(abc_)) == ["A", "B", "C"]
    # DOC man --null: "useful for processing arguments that may contain \n": from
    # -a FILE and from stdin (which used to print nothing and exit 0)
    names = tmp_path / "names"
    names.write_bytes(b"a b\0c\nd\0")
    assert lines("-k", "-0", "-a", str(names), "echo [{}]") == ["[a b]", "[c", "d]"]
    proc = run_cli("run", "-k", "--no-summary", "-0", "echo [{}]", input="x\0y z\0")
    assert proc.stdout == "[x]\n[y z]\n"


def test_quote() -> None:
    # DOC tutorial "Quoting": parallel perl -e 'print "@ARGV\n"' ::: This wont work
    # prints nothing; with -q it works. The same with python (perl may be missing).
    script = "import sys; print(*sys.argv[1:])"
    unquoted = run_cli("run", "--no-summary", "python3", "-c", script, ":::", "This", "wont")
    assert unquoted.stdout == "" and unquoted.returncode == 2  # both jobs fail in the shell
    assert lines("-k", "-q", "python3", "-c", script, ":::", "This", "works") == [
        "This",
        "works",
    ]
    # DOC man --quote: "special characters that should not be interpreted by the shell"
    assert lines("-q", "printf", "<%s>\\n", "x {} y", "{}", ":::", "a;b $c") == [
        "<x a;b $c y>",
        "<a;b $c>",
    ]


def test_shuf() -> None:
    # DOC tutorial "Shuffle job order": parallel --shuf echo ::: 1 2 3 ::: a b c ::: A B C
    # -> "All combinations but different order for each run"
    args = (":::", "1", "2", "3", ":::", "a", "b", "c", ":::", "A", "B", "C")
    every = sorted(f"{n} {s} {c}" for n in "123" for s in "abc" for c in "ABC")
    orders = set()
    for _ in range(3):  # 27! orders: three identical ones would mean no shuffle at all
        out = lines("-k", "--shuf", "echo", *args)
        assert sorted(out) == every
        orders.add(tuple(out))
    assert len(orders) > 1
    # {#} counts in run order, as GNU parallel numbers the shuffled jobs
    out = lines("-k", "--shuf", "echo {#}", ":::", *"abcdef")
    assert out == ["1", "2", "3", "4", "5", "6"]


def test_job_slot(tmp_path: Path) -> None:
    # DOC tutorial: parallel -j 2 echo {%} ::: A B C -> 1 2 1 ("the order may be
    # different and 1 and 2 may be swapped"): A and B run together, so their slots differ
    out = lines("-k", "-j", "2", "echo {%}", ":::", "A", "B", "C")
    assert sorted(out[:2]) == ["1", "2"] and out[2] in ("1", "2")
    # DOC man {%}: "There will never be 2 jobs running at the same time with the same
    # job slot number", and $PARALLEL_JOBSLOT is the same number. Jobs meet in pairs
    # (each waits for its partner's file), so pairs surely overlap in time.
    meet = tmp_path / "meet"
    meet.mkdir()
    cmd = (
        f"touch {meet}/{{#}}; p=$(( ({{#}} + 1) / 2 * 4 - 1 - {{#}} )); n=0; "
        f"until [ -e {meet}/$p ] || [ $n -gt 1000 ]; do sleep 0.01; n=$((n+1)); done; "
        f'echo {{#}} {{%}} "$PARALLEL_JOBSLOT"'
    )
    out = lines("-j", "2", cmd, ":::", *"abcdef")
    slots = {}
    for line in out:
        seq, slot, env_slot = line.split()
        assert slot == env_slot and slot in ("1", "2")
        slots[int(seq)] = slot
    assert sorted(slots) == [1, 2, 3, 4, 5, 6]
    for a in (1, 3, 5):  # partners ran at the same time
        assert slots[a] != slots[a + 1], slots


def _read_until(proc: subprocess.Popen, got: bytearray, wanted: bytes, timeout: float = 20) -> None:
    """Read the runner's stdout into ``got`` until it ends with ``wanted``."""
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout
    while not got.endswith(wanted):
        left = deadline - time.monotonic()
        assert left > 0, f"waited for {wanted!r}, got {bytes(got)!r}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 4096)
            assert chunk, f"stdout closed; waited for {wanted!r}, got {bytes(got)!r}"
            got += chunk


# The order the tutorial's sleeps open the gates in: jobs 4, 2, 1 start, then 2 (sleep 2)
# ends before 1 (started last, sleep 1), and 4 (sleep 4) ends last.
GATES = ("a4", "a2", "b2", "a1", "b1", "b4")


def _gated_run(tmp_path: Path, options: tuple[str, ...], wanted: list[bytes]) -> bytes:
    """The tutorial's ``parallel -j2 OPTION 'printf "%s-start\\n%s" {} {}; sleep {};
    printf "%s\\n" -middle; echo {}-end' ::: 4 2 1``, with each job's start and its
    sleep replaced by gates (files ``a{}`` and ``b{}``) the test opens in ``GATES``'
    order, each after reading the output ``wanted`` says must come first."""
    steps = list(zip(GATES, wanted, strict=True))
    gates = tmp_path / "gates"
    gates.mkdir(parents=True)

    def gate(name: str) -> str:
        return f"until [ -e {gates}/{name} ]; do sleep 0.005; done"

    cmd = (
        f'{gate("a{}")}; printf "%s-start\\n%s" {{}} {{}}; {gate("b{}")}; '
        'printf "%s\\n" -middle; echo {}-end'
    )
    runner = start_cli(
        "run",
        "-j2",
        *options,
        "--no-summary",
        "--timeout",
        "60",
        cmd,
        ":::",
        "4",
        "2",
        "1",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    got = bytearray()
    try:
        for opened, wanted in steps:
            (gates / opened).touch()
            if wanted:
                _read_until(runner, got, wanted)
        out, err = runner.communicate(timeout=30)
    finally:
        runner.kill()
    assert runner.returncode == 0, err
    return bytes(got) + out.encode()


@pytest.mark.parametrize(
    ("options", "wanted", "expected"),
    [
        # DOC tutorial: "To get the output immediately use --ungroup" -> half a line of
        # job 4 ("4") is followed by job 2's "2-start"
        pytest.param(
            ("--ungroup",),
            [b"4-start\n4", b"2-start\n2", b"-middle\n2-end\n", b"1-start\n1",
             b"-middle\n1-end\n", b""],
            ["4-start", "42-start", "2-middle", "2-end", "1-start", "1-middle", "1-end",
             "-middle", "4-end"],
            id="ungroup",
        ),
        # DOC tutorial: "To avoid this use --linebuffer": whole lines, as soon as complete
        pytest.param(
            ("--linebuffer",),
            [b"4-start\n", b"2-start\n", b"2-middle\n2-end\n", b"1-start\n",
             b"1-middle\n1-end\n", b""],
            ["4-start", "2-start", "2-middle", "2-end", "1-start", "1-middle", "1-end",
             "4-middle", "4-end"],
            id="line_buffer",
        ),
        # DOC man --line-buffer: "With --keep-order --line-buffer will output lines from
        # the first job continuously while it is running, then lines from the second job
        # while that is running. It will buffer full lines, but jobs will not mix." The
        # first job streams while it runs (a4); the second ends (b2) but waits for it.
        pytest.param(
            ("-k", "--line-buffer"),
            [b"4-start\n", b"", b"", b"", b"", b""],
            ["4-start", "4-middle", "4-end", "2-start", "2-middle", "2-end", "1-start",
             "1-middle", "1-end"],
            id="line_buffer_keep_order",
        ),
    ],
)  # fmt: skip
def test_gated_output_as_the_tutorial_shows(
    tmp_path: Path, options: tuple[str, ...], wanted: list[bytes], expected: list[str]
) -> None:
    """Each case: what must be read before each gate of ``GATES`` opens, then all of
    the output, line by line."""
    assert _gated_run(tmp_path, options, wanted).decode().splitlines() == expected


def test_delay(tmp_path: Path) -> None:
    # DOC tutorial "Timing": parallel --delay 2.5 echo Starting {}\;date ::: 1 2 3 ->
    # starts at least 2.5 s apart (scaled to 0.5 s here), even with free job slots
    log = tmp_path / "log"
    out = lines(
        "-k",
        "-j",
        "3",
        "--delay",
        "0.5",
        "--joblog",
        str(log),
        "echo Starting {}",
        ":::",
        "1",
        "2",
        "3",
    )
    assert out == ["Starting 1", "Starting 2", "Starting 3"]
    starts = sorted(float(r[2]) for r in joblog_rows(log))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # counted from when the runner sees the previous job running: its worker's steps
    # before the job's own start (a few ms) are the slack
    assert all(gap >= 0.5 - 0.05 for gap in gaps), gaps
    # DOC man --delay: "duration is in seconds, but can be postfixed with s, m, h, or d"
    assert lines("--delay", "0.01s", "echo", ":::", "x") == ["x"]


def test_eta() -> None:
    # DOC man --eta: "Show the estimated number of seconds before finishing ... Implies
    # --progress": shown on stderr, pipepool's progress line (docs/run.md: differs)
    proc = run_cli("run", "--eta", "-j", "2", "sleep", ":::", "0.1", "0.1", "0.1")
    assert proc.returncode == 0, proc.stderr
    assert "ETA" in proc.stderr and "3/3" in proc.stderr


@needs_proc
def test_load() -> None:
    # DOC tutorial "Limiting the resources": parallel --load 100% echo load is less than
    # {} job per cpu ::: 1 -> runs when the load is below one process per core; a limit
    # no machine is over runs at once
    out = lines("--load", "100000", "echo load is less than {} job per cpu", ":::", "1")
    assert out == ["load is less than 1 job per cpu"]
    assert lines("--load", "100000%", "echo", ":::", "x") == ["x"]


@needs_proc
def test_memfree() -> None:
    # DOC tutorial: parallel --memfree 1G echo will run if more than 1 GB is ::: free
    # (scaled to 1M, which any machine running the tests has)
    assert lines("--memfree", "1M", "echo will run if more than 1 MB is", ":::", "free") == [
        "will run if more than 1 MB is free"
    ]


def test_rejected_options_name_the_option_and_the_way_instead() -> None:
    # DOC man lists these; pipepool cannot honour them and says so, never silently
    for args, hint in [
        (["--pipe", "wc", "-l"], "split the input first"),
        (["-S", "host1", "echo", ":::", "a"], "--cluster ADDRESS"),
        (["--sshlogin=host1", "echo", ":::", "a"], "--cluster ADDRESS"),
        (["-X", "echo", ":::", "a"], "-N N"),
        (["--header", ":", "echo", ":::", "a"], "tail -n +2"),
        (["--timeout", "200%", "sleep", ":::", "1"], "give seconds"),
        (["-j", "0", "echo", ":::", "a"], "give a number"),
        (["--delay", "3auto", "echo", ":::", "a"], "fixed duration"),
    ]:
        proc = run_cli("run", *args)
        assert proc.returncode == 255, (args, proc.stderr)
        reason = proc.stderr.splitlines()[0]  # first, before one line of usage
        assert args[0].split("=")[0] in reason and hint in reason, proc.stderr
        assert "unrecognized" not in proc.stderr


def test_jobs_syntax() -> None:
    # DOC man --jobs: N, +N, -N, N% (of the cores)
    cores = default_jobs()  # the cores this process may use (no affinity on macOS)
    for spec, expected in [
        ("3", 3),
        ("+1", cores + 1),
        ("-1", max(cores - 1, 1)),
        ("50%", max(cores // 2, 1)),
    ]:
        proc = run_cli("run", "--json", "-j", spec, "true", ":::", "x")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[-1])["jobs"] == expected, spec
