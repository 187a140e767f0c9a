#!/usr/bin/env bash
# Prints the Debian packages that provide the shared libraries BINARY... link against
# directly (their ELF NEEDED entries, located by ldd, owned per dpkg -S), one per line:
# derived from the binaries themselves, so a runtime image or a worker host installs what
# the build linked, and apt brings those libraries' own dependencies.
#   apt-get install $(deploy/runtime-packages.sh omnilearn_server omnilearn_worker)
# Exits non-zero, naming it, when a library is missing or belongs to no package.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
declare -A paths=()
for bin in "$@"; do
  [ -x "$bin" ] || { echo "runtime-packages: $bin is not an executable" >&2; exit 2; }
  mapfile -t needed < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  declare -A where=()
  while read -r name _ path _; do where[$name]=$path; done < <(ldd "$bin" | grep '=>')
  for lib in "${needed[@]}"; do
    path=${where[$lib]:-}
    if [ -z "$path" ] || [ "$path" = "not" ]; then
      echo "runtime-packages: $bin needs $lib, which is not found" >&2
      exit 1
    fi
    paths[$path]=1
  done
  unset where
done
status=0
packages=()
for path in "${!paths[@]}"; do
  real=$(readlink -f "$path")
  pkg=""
  # dpkg knows a file by the path its package installed (merged /usr: /lib -> /usr/lib).
  for p in "$path" "$real" "/usr$path" "/usr$real" "${path#/usr}" "${real#/usr}"; do
    pkg=$(dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1) || true
    [ -n "$pkg" ] && break
  done
  if [ -z "$pkg" ]; then
    echo "runtime-packages: $path belongs to no Debian package" >&2
    status=1
  else
    packages+=("$pkg")
  fi
done
printf '%s\n' "${packages[@]}" | sort -u
exit "$status"
