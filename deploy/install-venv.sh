#!/usr/bin/env bash
# Makes (or checks) a pip venv of the test command, for one framework from PyPI: today's
# PyTorch (deploy/requirements-torch.txt) or TensorFlow with Keras 3
# (deploy/requirements-tensorflow.txt), every package pinned, in a plain venv of Debian's
# /usr/bin/python3 (no system site packages: the TensorFlow venv holds no torch), with this
# checkout's omnilearn installed into it by `pip install ./python`.
#   deploy/install-venv.sh torch|tensorflow [VENV]    prints VENV's path on its last line
# VENV defaults to ~/.cache/omnilearn-venv/FRAMEWORK-<its pin>. The wheels are kept in
# ~/.cache/omnilearn-wheels (OMNILEARN_WHEELS): a second run downloads nothing, and a venv
# that already holds the pinned set is only re-checked. Needs deploy/install-deps.sh first
# (python3-venv, and the -dev packages omnilearn's C++ core compiles against).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FRAMEWORK=${1:-}
say() { echo "install-venv: $*" >&2; }
case "$FRAMEWORK" in
  torch) package=torch check='import torch; from omnilearn import worker; version = f"torch {torch.__version__}"' ;;
  tensorflow)
    package=tensorflow-cpu
    check='import sys, tensorflow, keras; from omnilearn import keras as okeras
assert "torch" not in sys.modules, "omnilearn.keras imported torch"
version = f"tensorflow {tensorflow.__version__}, keras {keras.__version__}"' ;;
  *) say "usage: deploy/install-venv.sh torch|tensorflow [VENV]"; exit 2 ;;
esac
REQ=$ROOT/deploy/requirements-$FRAMEWORK.txt
pin=$(sed -n "s/^$package==//p" "$REQ")
VENV=${2:-$HOME/.cache/omnilearn-venv/$FRAMEWORK-$pin}
WHEELS=${OMNILEARN_WHEELS:-$HOME/.cache/omnilearn-wheels}

mkdir -p "$WHEELS"
# Only what the cache lacks is fetched (pip download skips files already there).
if ! /usr/bin/python3 -m pip --version >/dev/null 2>&1 && [ ! -x "$VENV/bin/pip" ]; then
  say "/usr/bin/python3 has no pip: run deploy/install-deps.sh (python3-pip, python3-venv)"; exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  say "making $VENV (a plain venv of /usr/bin/python3)"
  /usr/bin/python3 -m venv "$VENV" || { say "python3 -m venv failed: install python3-venv"; exit 1; }
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if ! "${pip[@]}" install --no-index --find-links "$WHEELS" -r "$REQ" 2>/dev/null; then
  say "fetching the pinned wheels into $WHEELS"
  "${pip[@]}" download --no-deps -d "$WHEELS" -r "$REQ" ||
    { say "pip download failed (is PyPI reachable?)"; exit 1; }
  "${pip[@]}" install --no-index --find-links "$WHEELS" -r "$REQ" ||
    { say "pip install from $WHEELS failed"; exit 1; }
fi
# The venv holds exactly the pinned versions of what the requirements name.
"$VENV/bin/python" - "$REQ" <<'PY' || exit 1
import sys
from importlib.metadata import version, PackageNotFoundError
bad = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, pin = line.split("==")
        try:
            have = version(name)
        except PackageNotFoundError:
            have = "missing"
        if have.split("+")[0] != pin:
            bad.append(f"{name} {have} (pinned {pin})")
if bad:
    sys.exit("install-venv: the venv does not hold the pinned set: " + ", ".join(bad))
PY
# This checkout's omnilearn, as a user installs it (stubs and C++ core built by setup.py),
# again only when its sources changed since the venv last installed them.
sources=$(cd "$ROOT" && find python proto common worker -type f \( -name '*.py' -o -name '*.cc' -o -name '*.h' \
  -o -name '*.proto' -o -name '*.toml' -o -name '*.txt' \) -not -path 'python/tests/*' | LC_ALL=C sort | xargs cat |
  sha256sum | cut -c1-16)
if [ "$(cat "$VENV/omnilearn-sources" 2>/dev/null)" != "$sources" ]; then
  say "pip install ./python into $VENV"
  # pip's build isolation, as a user's install: the build's setuptools and pybind11
  # (python/pyproject.toml) come from the wheel folder, pinned in the requirements.
  "${pip[@]}" install --no-index --find-links "$WHEELS" --no-deps --force-reinstall "$ROOT/python" ||
    { say "pip install ./python failed"; exit 1; }
  echo "$sources" > "$VENV/omnilearn-sources"
fi
(cd / && "$VENV/bin/python" -c "$check
import omnilearn
from omnilearn._native import core
assert 'site-packages' in omnilearn.__file__ and 'site-packages' in core.__file__
print(f'install-venv: {version}, omnilearn from {omnilearn.__file__}')" >&2) ||
  { say "omnilearn does not import in $VENV"; exit 1; }
echo "$VENV"
