#!/usr/bin/env bash
# One list of sources per build, checked against Bazel's, so that the builds cannot drift:
# - python/core_sources.txt (what setup.py compiles into omnilearn._core, what python_test.sh
#   copies) is exactly the checkout's sources of Bazel's //python:omnilearn/_core.so, and
#   //python:core_sources names the same files;
# - every .cc of a Bazel cc_library under common/, controller/, server/ and worker/ is built by
#   the CMakeLists.txt of the checkout (CMake builds for hosts without Bazel), but those below.
#   tests/sources_check.sh [--write]   (--write: python/core_sources.txt made anew from Bazel)
# Run from the checkout's root by tests/run.sh (Bazel cannot run inside a Bazel test).
set -uo pipefail
cd "$(dirname "$0")/.."
# Built by Bazel alone, and why.
BAZEL_ONLY="controller/simulation.cc"  # the controller's simulator: //controller:simulate
failed=0
query() { bazel query "$1" 2>/dev/null | sed 's|^//||; s|:|/|' | LC_ALL=C sort; }

core=$(query 'kind("source file", deps(//python:omnilearn/_core.so))' | grep -E '^(common|python|worker)/')
[ -n "$core" ] || { echo "sources_check: bazel query found no sources of //python:omnilearn/_core.so" >&2; exit 1; }
listed=$(grep -v '^#' python/core_sources.txt | LC_ALL=C sort)
if [ "${1:-}" = "--write" ]; then
  { grep '^#' python/core_sources.txt; echo "$core"; } > python/core_sources.txt.new &&
    mv python/core_sources.txt.new python/core_sources.txt
  listed=$core
fi
if [ "$core" != "$listed" ]; then
  echo "sources_check: python/core_sources.txt is not the sources of //python:omnilearn/_core.so" \
    "(< Bazel, > the list; tests/sources_check.sh --write makes it anew):" >&2
  diff <(echo "$core") <(echo "$listed") | grep '^[<>]' >&2
  failed=1
fi
group=$(query 'labels(srcs, //python:core_sources)')
if [ "$core" != "$group" ]; then
  echo "sources_check: //python:core_sources (python/BUILD) names other files than the core's sources:" >&2
  diff <(echo "$core") <(echo "$group") | grep '^[<>]' >&2
  failed=1
fi

bazel_cc=$(query 'labels(srcs, attr(testonly, 0, kind(cc_library, //common/... + //controller/... + //server/... + //worker/...)))' |
  grep '\.cc$')
cmake_cc=$(for d in common controller server worker; do
  grep -oE '[A-Za-z0-9_./]+\.cc' "$d/CMakeLists.txt" | sed "s|^|$d/|"
done | /usr/bin/python3 -c 'import os, sys; print("\n".join(os.path.normpath(l.strip()) for l in sys.stdin))' |
  LC_ALL=C sort -u)
missing=$(LC_ALL=C comm -23 <(echo "$bazel_cc") <(echo "$cmake_cc") | grep -vxF -f <(tr ' ' '\n' <<<"$BAZEL_ONLY"))
if [ -n "$missing" ]; then
  echo "sources_check: Bazel libraries' sources the CMake build does not compile (add them to the folder's" \
    "CMakeLists.txt, or to BAZEL_ONLY here with the reason):" >&2
  echo "$missing" >&2
  failed=1
fi
[ $failed -eq 0 ] && echo "sources_check: the core's $(grep -c . <<<"$core") sources and the CMake build agree with Bazel"
exit $failed
