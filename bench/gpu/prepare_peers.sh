#!/bin/bash
# Fills .gpu/ (ignored by git) with what bench/gpu/peers_device.sh needs on a GPU host that has
# no network, no Bazel and another Python (3.12 with its own PyTorch): the server built here
# (-c opt) and the shared libraries it loads beyond glibc, libstdc++, OpenSSL and zlib; the
# headers and libraries the Python worker core (omnilearn._core) compiles and links against
# there; the proto's C++ and Python code; iproute2's ip and tc with their libraries (in case
# the host lacks them). Run from the checkout's root after
#   bazel build -c opt //server:omnilearn_server
set -euo pipefail
G=.gpu; rm -rf $G; mkdir -p $G/bin $G/lib $G/include $G/gen/proto $G/stubs
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.gpu/ >> .git/info/exclude; }
cp bazel-bin/server/omnilearn_server $G/bin/
cp /usr/sbin/ip /usr/sbin/tc $G/bin/
SKIP='^(linux-vdso|libc\.|libm\.|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.|librt\.|libssl|libcrypto|libz\.)'
carry_libs() {  # carry_libs DIR BINARY...: the binaries' libraries beyond the host's own
  mkdir -p $1; local d=$1; shift
  for lib in $(ldd "$@" | awk '$3 ~ /^\// {print $3}' | sort -u); do [[ $(basename $lib) =~ $SKIP ]] || cp -L $lib $d/; done
}
carry_libs $G/lib $G/bin/omnilearn_server
carry_libs $G/iplib $G/bin/ip $G/bin/tc  # used only where the host has no ip and tc of its own
PKGS="grpc++ protobuf absl_statusor absl_synchronization absl_str_format absl_time absl_strings"
# The core's link: every -l of pkg-config, as the versioned files carried (linked by full name there).
for l in $(pkg-config --libs $PKGS | tr ' ' '\n' | sed -n 's/^-l//p' | sort -u); do
  f=$(ls /usr/lib/x86_64-linux-gnu/lib$l.so.* 2>/dev/null | head -1) || true
  if [ -z "$f" ] || [[ $(basename $f) =~ $SKIP ]]; then echo "-l$l"; else cp -L $f $G/lib/; echo "@G@/lib/$(basename $f)"; fi
done > $G/core_libs.txt  # the core's link arguments (@G@: .gpu's path there)
for d in grpc grpc++ grpcpp absl google/protobuf nlohmann; do mkdir -p $G/include/$(dirname $d); cp -r /usr/include/$d $G/include/$d; done
protoc --proto_path=. --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin --cpp_out=$G/gen --grpc_out=$G/gen proto/omnilearn.proto proto/etcd.proto
/usr/bin/python3 python/omnilearn/_stubs.py --proto proto/omnilearn.proto --out $G/stubs
grep '\.cc$' python/core_sources.txt > $G/core_sources.txt  # the core's .cc files (one list)
du -sh $G
