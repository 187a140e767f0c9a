#!/usr/bin/env bash
# The C++ sources as .clang-format lays them out (clang-format 14, Debian's clang-format):
# lists every file that differs and fails. To fix: clang-format -i FILE...
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format > /dev/null || { echo "format_check: clang-format is not installed" >&2; exit 1; }
bad=()
while IFS= read -r f; do
  clang-format --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.cc' '*.h' ':!:third_party/*')
if [ "${#bad[@]}" -gt 0 ]; then
  printf 'format_check: not as .clang-format lays it out: %s\n' "${bad[@]}" >&2
  echo "format_check: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "format_check: $(git ls-files '*.cc' '*.h' ':!:third_party/*' | wc -l) files as .clang-format lays them out"
