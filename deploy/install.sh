#!/usr/bin/env bash
# Installs the three binaries, optimized: omnilearn_server, omnilearn_worker and
# omnilearn_ctl, into PREFIX/bin, where a shell, the systemd units and
# `python -m omnilearn.run` find them (they link only Debian's libraries).
#   ./deploy/install.sh                 into /usr/local/bin (on PATH)
#   ./deploy/install.sh --prefix=env    into env/bin (e.g. the virtual environment of the Python workers)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local
for arg in "$@"; do
  case "$arg" in
    --prefix=*) prefix=${arg#*=} ;;
    -h | --help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done
./deploy/install-deps.sh
bazel build -c opt //server:omnilearn_server //worker:omnilearn_worker //tools:omnilearn_ctl
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
mkdir -p "$prefix/bin"
install -m 0755 "$bin/server/omnilearn_server" "$bin/worker/omnilearn_worker" "$bin/tools/omnilearn_ctl" "$prefix/bin/"
echo "install: omnilearn_server, omnilearn_worker and omnilearn_ctl are in $(cd "$prefix/bin" && pwd)"
