#!/usr/bin/env python3
"""The CUDA backend as a plugin: stoker-trainer links no CUDA library and maps none for
--version or --device cpu; libstoker-cuda.so (when this build has CUDA) links cudart and cuBLAS,
exports only its descriptor and loads with dlopen; and each way --device gpu|auto can miss a GPU
says why (no plugin, a plugin that does not load, a file that is not a plugin, no GPU), with
exit 1 for gpu and a CPU fallback for auto. Checks that need the absence of a GPU say so and are
left out where one is usable.

    test_plugin.py TRAINER [PLUGIN]   (PLUGIN: the built libstoker-cuda.so, when CUDA is built)"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

TRAINER = os.path.abspath(sys.argv[1])
PLUGIN = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
RUN = ["--inline", "--delay", "0:0", "--rounds", "1", "--round-length", "64", "--batch-size", "64",
       "--hidden", "8", "--progress", "off"]
passed = failed = 0


def check(what, ok, detail=""):
    global passed, failed
    ok = bool(ok)
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        print("     " + str(detail).replace("\n", "\n     ")[:3000])
    passed += ok
    failed += not ok


def trainer(*args, env=None, exe=TRAINER):
    e = dict(os.environ)
    e.pop("STOKER_CUDA_PLUGIN", None)
    e.update(env or {})
    return subprocess.run([exe, *args], capture_output=True, text=True, env=e, timeout=60)


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]


def gpu_usable():
    return bool(shutil.which("nvidia-smi")) and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0


def loaded_files(*args, env=None):
    """The shared objects the dynamic loader opened for a run (LD_DEBUG=files)."""
    out = trainer(*args, env=dict(env or {}, LD_DEBUG="files"))
    return [l.split("file=")[1].split()[0] for l in out.stderr.splitlines()
            if "file=" in l and ("needed by" in l or "dynamically loaded by" in l)]


# The trainer itself.
libs = needed(TRAINER)
check(f"stoker-trainer links no CUDA library (NEEDED: {', '.join(libs)})",
      not any(l.startswith(("libcuda", "libcublas", "libcudart")) for l in libs), libs)
for args in (["--version"], RUN + ["--device", "cpu"]):
    files = loaded_files(*args)
    check(f"stoker-trainer {args[0]}{' --device cpu' if len(args) > 1 else ''} maps neither the "
          f"plugin nor a CUDA library", files and not any("cuda" in f or "cublas" in f for f in files),
          files)

if PLUGIN:
    plibs = needed(PLUGIN)
    check(f"libstoker-cuda.so links cudart and cuBLAS ({', '.join(plibs)})",
          any(l.startswith("libcudart") for l in plibs) and any(l.startswith("libcublas") for l in plibs))
    syms = subprocess.run(["nm", "-D", "--defined-only", PLUGIN], capture_output=True, text=True,
                          check=True).stdout.split()
    exported = [s for s in syms[2::3]]
    check(f"libstoker-cuda.so exports only stoker_cuda_plugin_v1 ({', '.join(exported)})",
          exported == ["stoker_cuda_plugin_v1"], syms)

    class Descriptor(ctypes.Structure):
        _fields_ = [("abi", ctypes.c_uint32), ("backend_size", ctypes.c_uint32),
                    ("ops_size", ctypes.c_uint32), ("version", ctypes.c_char_p),
                    ("create", ctypes.c_void_p)]
    try:
        lib = ctypes.CDLL(PLUGIN, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        d = Descriptor.in_dll(lib, "stoker_cuda_plugin_v1")
        check(f"libstoker-cuda.so loads with dlopen: ABI {d.abi}, version {d.version.decode()}, "
              f"create set", d.abi == 1 and d.version.decode() == os.environ.get(
                  "STOKER_VERSION", d.version.decode()) and d.create)
    except OSError as e:
        check("libstoker-cuda.so loads with dlopen", False, e)
    files = loaded_files(*RUN, "--device", "auto")
    check("--device auto opens the plugin beside the trainer (and through it cudart)",
          any(f.endswith("/libstoker-cuda.so") for f in files)
          and any("libcudart" in f for f in files), files)

# Reasons that hold with or without a GPU: a plugin that does not load, a file that is not one.
r = trainer(*RUN, "--device", "gpu", env={"STOKER_CUDA_PLUGIN": "/nonexistent/libstoker-cuda.so"})
check(f"STOKER_CUDA_PLUGIN missing: --device gpu exits 1 naming it (exit {r.returncode})",
      r.returncode == 1 and "STOKER_CUDA_PLUGIN: cannot load the CUDA backend plugin "
      "/nonexistent/libstoker-cuda.so" in r.stderr, r.stderr)
r = trainer(*RUN, "--device", "auto", env={"STOKER_CUDA_PLUGIN": "/nonexistent/libstoker-cuda.so"})
check("STOKER_CUDA_PLUGIN missing: --device auto falls back to the CPU saying why",
      r.returncode == 0 and "backend-fallback: STOKER_CUDA_PLUGIN: cannot load" in r.stderr,
      r.stderr)
notplugin = next((l for l in ["/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                              "/lib/aarch64-linux-gnu/libz.so.1"] if os.path.exists(l)), None)
if notplugin:
    r = trainer(*RUN, "--device", "gpu", env={"STOKER_CUDA_PLUGIN": notplugin})
    check("a library that is not the plugin is refused by name",
          r.returncode == 1 and "is not a stoker CUDA backend plugin (no symbol "
          "stoker_cuda_plugin_v1)" in r.stderr, r.stderr)

if gpu_usable():
    print("(a GPU is usable here: the checks of the messages without one are left out)")
else:
    if PLUGIN:
        r = trainer(*RUN, "--device", "gpu")
        check(f"plugin found, no GPU: --device gpu exits 1 with the reason (exit {r.returncode})",
              r.returncode == 1 and "--device gpu: no usable GPU" in r.stderr, r.stderr)
        r = trainer(*RUN, "--device", "auto")
        check("plugin found, no GPU: --device auto trains on the CPU and says why",
              r.returncode == 0 and "backend-fallback: no usable GPU" in r.stderr
              and "backend: cpu" in r.stderr, r.stderr)
    # A trainer with no plugin beside it (copied alone; its libstoker through LD_LIBRARY_PATH).
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "stoker-trainer")
        shutil.copy(TRAINER, alone)
        libdirs = ":".join(sorted({os.path.dirname(l.split("=>")[1].split()[0])
                                   for l in subprocess.run(["ldd", TRAINER], capture_output=True,
                                                           text=True).stdout.splitlines()
                                   if "libstoker" in l and "=>" in l}))
        env = {"LD_LIBRARY_PATH": libdirs}
        r = trainer(*RUN, "--device", "gpu", env=env, exe=alone)
        if "no CUDA backend plugin" not in r.stderr and "cannot load" in r.stderr:
            print("(a plugin is installed at the install path: the no-plugin message is left out)")
        else:
            check(f"no plugin anywhere: --device gpu exits 1 saying where it looked (exit {r.returncode})",
                  r.returncode == 1 and f"no CUDA backend plugin: libstoker-cuda.so is neither "
                  f"beside this program ({tmp}/libstoker-cuda.so) nor at" in r.stderr
                  and "install the stoker-cuda package" in r.stderr, r.stderr)
            r = trainer(*RUN, "--device", "auto", env=env, exe=alone)
            check("no plugin anywhere: --device auto trains on the CPU saying why",
                  r.returncode == 0 and "backend-fallback: no CUDA backend plugin" in r.stderr,
                  r.stderr)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
