#!/bin/bash
# bench/peers.py and the Python worker's CUDA path on a 16-core GPU host with no network, no
# Bazel and a Python of its own (3.12, its own PyTorch): what bench/gpu/prepare_peers.sh put
# in .gpu/ (the server built on Debian 12, its libraries, the headers the Python worker core
# compiles against, the proto's code) is set up here, the core is compiled for this Python,
# then: the CUDA job (bench/gpu/python_cuda_job.py), a probe of the emulated cluster (network
# namespaces, tc tbf), and bench/peers.py's runs, each bounded by `timeout`. Results go to $OUT
# (default /tmp/omnilearn-peers-gpu): log.txt and each group's peers_<group>.{md,json}.
#   bench/gpu/prepare_peers.sh        (on the Debian machine, after bazel build -c opt)
#   bench/gpu/peers_device.sh         (on the GPU host, from the checkout's root)
set -uo pipefail
OUT=${OUT:-/tmp/omnilearn-peers-gpu}; mkdir -p $OUT; exec > >(tee $OUT/log.txt) 2>&1
G=$PWD/.gpu; T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
echo "== machine"; nproc; free -g | head -2; head -2 /etc/os-release; uname -r; g++ --version | head -1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import sys,torch,torchvision,grpc,google.protobuf as pb; print(sys.version.split()[0], "torch", torch.__version__, "vision", torchvision.__version__, "grpcio", grpc.__version__, "protobuf", pb.__version__, "cuda", torch.cuda.is_available())'
for f in $G/lib/*.so.*; do ln -sf $(basename $f) ${f%%.so.*}.so; done
export LD_LIBRARY_PATH=$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p $G/server && cp $G/bin/omnilearn_server $G/server/
$G/server/omnilearn_server --helpfull >/dev/null 2>&1; echo "server runs here: rc $? (0 or 1 = it loaded)"
echo "== the Python worker core for $(python3 --version)"; el
PYINC=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
PB=$(python3 -c 'import pybind11; print(pybind11.get_include())')
EXT=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
[ -f $PYINC/Python.h ] || { echo "no Python.h in $PYINC: the core cannot be built here"; exit 1; }
O=/tmp/core-o; mkdir -p $O
for s in $(cat $G/core_sources.txt) $G/gen/proto/{omnilearn,etcd}.pb.cc $G/gen/proto/{omnilearn,etcd}.grpc.pb.cc; do
  g++ -std=c++17 -O2 -fPIC -fvisibility=hidden -w -include cstdint -I. -I$G/gen -isystem $G/include -I$PB -I$PYINC -c $s \
    -o $O/$(echo $s | tr / _).o &
done; wait
g++ -shared -o python/omnilearn/_core$EXT $O/*.o $(sed "s|@G@|$G|" $G/core_libs.txt) -lz \
  -Wl,-rpath,$G/lib || { echo "the core did not link"; exit 1; }
rm -rf python/omnilearn/_generated; cp -r $G/stubs python/omnilearn/_generated
PYTHONPATH=python python3 -c 'import omnilearn, omnilearn.worker; print("omnilearn imports")' || exit 1
el
echo "== the Python worker's CUDA path"
timeout 150 python3 bench/gpu/python_cuda_job.py --server_bin=$G/server/omnilearn_server --iterations=60 \
  > $OUT/cuda.txt 2>&1; echo "cuda job rc $?"; cat $OUT/cuda.txt | tail -20; el
echo "== emulated cluster probe"
command -v tc >/dev/null || { mkdir -p $G/ipbin; for t in ip tc; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/iplib exec %s/bin/%s "$@"\n' $G $G $t > $G/ipbin/$t; chmod +x $G/ipbin/$t; done
  export PATH=$G/ipbin:$PATH; echo "using the carried ip and tc"; }
tests/cluster.sh down olprobe; tests/cluster.sh up olprobe a=1gbit b=1gbit && tests/cluster.sh probe olprobe a b 50
rc=$?; tests/cluster.sh down olprobe; [ $rc -eq 0 ] || { echo "no emulated cluster here (rc $rc)"; exit 1; }
el
group() {  # group NAME SECONDS PEERS-ARGS...
  local name=$1 secs=$2; shift 2
  timeout $secs python3 bench/peers.py --bin_dir=$G --out=/tmp/peers-$name "$@"; echo "$name rc $?"
  for e in md json; do [ -f /tmp/peers-$name/peers.$e ] && cp /tmp/peers-$name/peers.$e $OUT/peers_$name.$e; done; el
}
export PYTHONPATH=$PWD/python
group mlp4 200 --models=mlp4 --levels=HL1,HL8 --iterations=30 --skip=10
group resnet18 170 --models=resnet18 --levels=HL8 --systems=ddp,ddp-balanced,omnilearn-colocated --iterations=24 --skip=8
echo "== done"; el
