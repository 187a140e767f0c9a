"""Finds LibTorch for the build.

Default: Debian 12's libtorch-dev (headers under /usr/include, libraries on the system path).
OMNILEARN_TORCH_DIR=/path points at another LibTorch laid out as include/ and lib/: the CUDA
LibTorch archive, or a pip PyTorch's package folder (python3 -c 'import torch,os;
print(os.path.dirname(torch.__file__))'). Its C++ ABI must be the new one
(_GLIBCXX_USE_CXX11_ABI=1), as Debian's gRPC and protobuf are built with it.
"""

def _torch_configure_impl(ctx):
    root = ctx.os.environ.get("OMNILEARN_TORCH_DIR", "")
    if root == "":
        api = "/usr/include/torch/csrc/api/include"
        if not ctx.path(api).exists:
            fail("LibTorch headers not found at %s: run deploy/install-deps.sh (libtorch-dev) " % api +
                 "or set OMNILEARN_TORCH_DIR")
        ctx.symlink(api, "api_include")
        includes = ["api_include"]
        linkopts = ["-ltorch", "-ltorch_cpu", "-lc10"]
        hdr_globs = ["api_include/**"]
        cuda = False
    else:
        if not ctx.path(root + "/include/torch/csrc/api/include").exists:
            fail("OMNILEARN_TORCH_DIR=%s has no include/torch/csrc/api/include" % root)
        ctx.symlink(root + "/include", "include")
        ctx.symlink(root + "/include/torch/csrc/api/include", "api_include")
        includes = ["include", "api_include"]
        hdr_globs = ["include/**", "api_include/**"]
        lib = root + "/lib"
        cuda = ctx.path(lib + "/libtorch_cuda.so").exists
        linkopts = ["-L" + lib, "-Wl,-rpath," + lib, "-Wl,--no-as-needed"]
        if cuda:
            linkopts += ["-ltorch_cuda", "-lc10_cuda"]
        linkopts += ["-ltorch", "-ltorch_cpu", "-lc10", "-Wl,--as-needed"]
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "torch",
    hdrs = glob({hdrs}, allow_empty = True),
    includes = {includes},
    defines = ["_GLIBCXX_USE_CXX11_ABI=1"],
    linkopts = {linkopts} + ["-lpthread"],
)

""".format(hdrs = repr(hdr_globs), includes = repr(includes), linkopts = repr(linkopts)))

torch_configure = repository_rule(
    implementation = _torch_configure_impl,
    environ = ["OMNILEARN_TORCH_DIR"],
    local = True,
)
