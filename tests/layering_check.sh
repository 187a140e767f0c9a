#!/usr/bin/env bash
# The build refuses an edge up the layers (server/BUILD's package groups, docs/ARCHITECTURE.md's
# "may use" table). Each probe is a throw-away package holding one cc_library with one
# dependency, analysed (not built): the upward ones must fail on visibility, the allowed ones
# must pass (so a failure is the wall's, not a broken probe's). The probes are removed at exit.
# Run from the checkout's root by tests/run.sh (Bazel cannot run inside a Bazel test).
set -uo pipefail
cd "$(dirname "$0")/.."
probes=()
cleanup() { rm -rf "${probes[@]}"; }
trap cleanup EXIT

# probe KIND FOLDER DEP: a package FOLDER/layering_probe whose library depends on DEP.
probe() {
  local kind=$1 dir=$2/layering_probe dep=$3 out
  mkdir -p "$dir" && probes+=("$dir")
  printf 'cc_library(\n    name = "probe",\n    deps = ["%s"],\n)\n' "$dep" > "$dir/BUILD"
  out=$(bazel build --nobuild "//$dir:probe" 2>&1)
  local rc=$?
  rm -rf "$dir"
  case $kind in
    refused)
      if [ $rc -eq 0 ] || ! grep -q "is not visible from" <<<"$out"; then
        echo "layering_check: //$2 -> $dep was not refused on visibility:" >&2
        tail -n 5 <<<"$out" >&2
        return 1
      fi ;;
    allowed)
      if [ $rc -ne 0 ]; then
        echo "layering_check: //$2 -> $dep, an allowed edge, failed:" >&2
        tail -n 5 <<<"$out" >&2
        return 1
      fi ;;
  esac
  echo "layering_check: //$2 -> $dep $kind"
}

fails=0
probe refused server/data //server/rpc:service || fails=$((fails + 1))
probe refused server/control //server/rpc:service || fails=$((fails + 1))
probe refused server/data //server/control:parameter_server_core || fails=$((fails + 1))
probe refused server/rpc //server/daemon || fails=$((fails + 1))
probe refused common //server/data:parameter_store || fails=$((fails + 1))
probe refused controller //server/control:parameter_server_core || fails=$((fails + 1))
probe refused worker //server/checkpoint:checkpoint || fails=$((fails + 1))
probe allowed server/daemon //server/rpc:service || fails=$((fails + 1))
probe allowed server/rpc //server/control:coordinator_shards || fails=$((fails + 1))
probe allowed server/data //server/control:data_plane || fails=$((fails + 1))
probe allowed server/control //server/data:parameter_store || fails=$((fails + 1))
[ $fails -eq 0 ]
