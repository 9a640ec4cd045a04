#!/bin/sh
# Validate docker/compose*.yml, docker/stack.yml (schema only), docker/.env.example and
# docker/Dockerfile without a Docker engine (tests/containers/ runs them for real).
#
#   sh tests/docker/validate-compose.sh [REPO_ROOT]
#
# For each compose file: `docker-compose config -q` (the schema and interpolation, with the
# required variables set), then facts checked on the resolved configuration (python3 + PyYAML):
# replicas, GPU reservation, the contract's command lines, ports, the /out volume, build targets.
# The Dockerfile is checked as text: stages, bases, USER non-root in every runtime stage,
# HEALTHCHECK on the broker. No image is built.
#
# Exit: 0 all checks passed, 1 a check failed, 77 skipped (no docker-compose), as meson expects.
set -u

root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
dd=$root/docker

if command -v docker-compose >/dev/null 2>&1; then
    compose=docker-compose
elif command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
    compose="docker compose"
else
    echo "SKIP: docker-compose is not installed (apt-get install --no-install-recommends docker-compose)"
    exit 77
fi
echo "using: $($compose version 2>/dev/null | head -n 1)"

# Defaults must be checked as shipped: drop STOKER_* from the environment and hide any docker/.env
# behind an empty --env-file.
for v in $(env | sed -n 's/^\(STOKER_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
: > "$tmp/empty.env"

failures=0
pass() { echo "ok:   $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run_config OUT FILE ENV_FILE [VAR=VALUE ...]: resolved config of FILE into $tmp/OUT.yml
run_config() {
    out=$1 file=$2 envfile=$3
    shift 3
    env "$@" $compose --env-file "$envfile" -f "$dd/$file" config > "$tmp/$out.yml" 2> "$tmp/$out.err"
}

for f in Dockerfile compose.yml compose.producers.yml compose.trainer.yml stack.yml .env.example stage-install.sh; do
    if [ -f "$dd/$f" ]; then pass "docker/$f exists"; else fail "docker/$f is missing"; fi
done
if sh -n "$dd/stage-install.sh" 2>/dev/null; then pass "docker/stage-install.sh parses (sh -n)"; else fail "docker/stage-install.sh has a shell syntax error"; fi

# 1. docker-compose config -q on each file, required variables set.
for f in compose.yml compose.trainer.yml stack.yml; do
    if env $compose --env-file "$tmp/empty.env" -f "$dd/$f" config -q 2> "$tmp/q.err"; then
        pass "$compose -f docker/$f config -q"
    else
        fail "$compose -f docker/$f config -q: $(cat "$tmp/q.err")"
    fi
done
if env STOKER_BROKER=tcp://gpu-box:7070 $compose --env-file "$tmp/empty.env" -f "$dd/compose.producers.yml" config -q 2> "$tmp/q.err"; then
    pass "STOKER_BROKER=tcp://gpu-box:7070 $compose -f docker/compose.producers.yml config -q"
else
    fail "$compose -f docker/compose.producers.yml config -q: $(cat "$tmp/q.err")"
fi

# 2. compose.producers.yml refuses to start without STOKER_BROKER, naming the variable.
if $compose --env-file "$tmp/empty.env" -f "$dd/compose.producers.yml" config -q > /dev/null 2> "$tmp/q.err"; then
    fail "compose.producers.yml accepted an unset STOKER_BROKER"
elif grep -q 'set STOKER_BROKER to tcp://GPU_HOST:7070' "$tmp/q.err"; then
    pass "compose.producers.yml without STOKER_BROKER fails with: set STOKER_BROKER to tcp://GPU_HOST:7070"
else
    fail "compose.producers.yml without STOKER_BROKER fails, but without the expected message: $(cat "$tmp/q.err")"
fi

# 3. docker/.env.example is a usable env file for all three.
for f in compose.yml compose.trainer.yml compose.producers.yml; do
    if $compose --env-file "$dd/.env.example" -f "$dd/$f" config -q 2> "$tmp/q.err"; then
        pass "$compose --env-file docker/.env.example -f docker/$f config -q"
    else
        fail "docker/.env.example with docker/$f: $(cat "$tmp/q.err")"
    fi
done

# 4. Resolved configurations for the fact checks.
run_config all-default compose.yml "$tmp/empty.env"
run_config all-set compose.yml "$tmp/empty.env" STOKER_PRODUCERS=7 STOKER_QUEUE_DEPTH=128 \
    STOKER_TIME_GOAL=5 STOKER_DELAY=0:0 STOKER_METRICS_PORT=19090 STOKER_TAG=t1
run_config trainer-default compose.trainer.yml "$tmp/empty.env"
run_config producers-default compose.producers.yml "$tmp/empty.env" STOKER_BROKER=tcp://10.0.0.5:7070
run_config producers-set compose.producers.yml "$tmp/empty.env" STOKER_BROKER=tcp://gpu-box:7070 STOKER_PRODUCERS=12

if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 not found: fact checks on the resolved configuration and Dockerfile not run"
else
    python3 - "$tmp" "$dd" <<'PYEOF'
import os, re, sys

tmp, dd = sys.argv[1], sys.argv[2]
failures = 0

def check(cond, what):
    global failures
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures += 1

# ---------------------------------------------------------------- Dockerfile, as text
stages = {}      # name -> {"from": base, "lines": [(instr, args)]}
order = []
global_args = {}
with open(os.path.join(dd, "Dockerfile")) as fh:
    text = re.sub(r"\\\n", " ", fh.read())          # join continuation lines
known = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
         "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
bad = []
cur = None
for raw in text.splitlines():
    line = raw.strip()
    if not line or line.startswith("#"):
        continue
    instr, _, args = line.partition(" ")
    instr = instr.upper()
    if instr not in known:
        bad.append(instr)
        continue
    if instr == "FROM":
        m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", args, re.I)
        name = (m.group(2) or str(len(order))).lower()
        stages[name] = {"from": m.group(1), "lines": []}
        order.append(name)
        cur = name
    elif cur is None:
        if instr == "ARG":
            k, _, v = args.partition("=")
            global_args[k.strip()] = v.strip()
        else:
            bad.append(instr + " before FROM")
    else:
        stages[cur]["lines"].append((instr, args.strip()))
check(not bad, "Dockerfile: only known instructions" + (f" (found {bad})" if bad else ""))

def expand(s):
    return re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)), s)

def base(name):
    return expand(stages[name]["from"])

def chain(name):
    """The stage and the stages it is built FROM, nearest first."""
    out = []
    while name in stages:
        out.append(name)
        name = base(name).lower()
    return out, name      # name: the external base image at the end

def final_user(name):
    for st in chain(name)[0]:
        users = [a for i, a in stages[st]["lines"] if i == "USER"]
        if users:
            return expand(users[-1])
    return None           # root by default

for need in ("build", "broker", "producer", "trainer", "cuda-build"):
    check(need in stages, f"Dockerfile: stage '{need}' exists")
for i, name in enumerate(order):
    froms = sorted({m.group(1) for instr, args in stages[name]["lines"] if instr == "COPY"
                    for m in [re.search(r"--from=(\S+)", args)] if m})
    for src in froms:
        check(src.lower() in order[:i], f"Dockerfile: stage '{name}' copies from earlier stage '{src}'")

if "build" in stages:
    check(re.match(r"debian:bookworm", base("build")) is not None,
          f"Dockerfile: build stage is Debian 12 ({base('build')})")
    runs = " ".join(a for i, a in stages["build"]["lines"] if i == "RUN")
    for pkg in ("meson", "ninja-build", "cmake", "pkg-config", "gcc", "libnng-dev", "libprotobuf-c-dev",
                "protobuf-c-compiler", "libopenblas-dev", "libpng-dev", "libjpeg62-turbo-dev"):
        check(re.search(r"(?<![\w-])" + re.escape(pkg) + r"(?![\w-])", runs) is not None,
              f"Dockerfile: build stage installs {pkg}")
    check("-Dtests=disabled" in runs and "-Dcuda=disabled" in runs,
          "Dockerfile: build stage configures -Dtests=disabled -Dcuda=disabled")
if "cuda-build" in stages:
    b = base("cuda-build")
    check(re.match(r"nvidia/cuda:13\.\d+\.\d+-devel-", b) is not None,
          f"Dockerfile: cuda-build stage is a CUDA 13 devel image ({b})")
    runs = " ".join(a for i, a in stages["cuda-build"]["lines"] if i == "RUN")
    check("-Dcuda=enabled" in runs, "Dockerfile: cuda-build configures -Dcuda=enabled")

runtime = [s for s in ("broker", "producer", "trainer", "trainer-cpu") if s in stages]
for st in runtime:
    u = final_user(st)
    name = (u or "root").split(":")[0]
    check(u is not None and name not in ("root", "0"),
          f"Dockerfile: runtime stage '{st}' runs as a non-root USER ({u or 'none: root'})")
    _, ext = chain(st)
    cmds = [a for s in chain(st)[0] for i, a in stages[s]["lines"] if i in ("CMD", "ENTRYPOINT")]
    check(bool(cmds), f"Dockerfile: runtime stage '{st}' has a CMD")
for st in ("broker", "producer", "trainer-cpu"):
    if st in stages:
        ext = chain(st)[1]
        check(ext.startswith("debian:bookworm-slim"), f"Dockerfile: '{st}' runs on {ext}")
if "broker" in stages:
    hc = [a for s in chain("broker")[0] for i, a in stages[s]["lines"] if i == "HEALTHCHECK"]
    check(any("http://127.0.0.1:9090/status" in a for a in hc),
          "Dockerfile: broker HEALTHCHECK requests http://127.0.0.1:9090/status")
    runs = " ".join(a for s in chain("broker")[0] for i, a in stages[s]["lines"] if i == "RUN")
    for pkg in ("libnng1", "libprotobuf-c1", "libopenblas0", "libpng16-16", "libjpeg62-turbo", "curl"):
        check(re.search(r"(?<![\w-])" + re.escape(pkg) + r"(?![\w-])", runs) is not None,
              f"Dockerfile: broker/producer runtime installs {pkg}")
if "trainer" in stages:
    ext = chain("trainer")[1]
    check(re.match(r"nvidia/cuda:13\.\d+\.\d+-runtime-", ext) is not None,
          f"Dockerfile: trainer runs on a CUDA 13 runtime image ({ext})")
    lines = [(i, a) for s in chain("trainer")[0] for i, a in stages[s]["lines"]]
    check(any(i == "ENV" and "LD_LIBRARY_PATH" in a and "/usr/local/cuda" in a for i, a in lines)
          or any(i == "RUN" and "ld.so.conf.d" in a for i, a in lines),
          "Dockerfile: trainer puts the CUDA libraries on the loader path")

# ---------------------------------------------------------------- resolved compose files
try:
    import yaml
except ImportError:
    print("SKIP: python3 has no PyYAML: fact checks on the resolved compose files not run")
    sys.exit(1 if failures else 0)

def load(name):
    path = os.path.join(tmp, name + ".yml")
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        if isinstance(doc, dict) and "services" in doc:
            return doc
    except Exception:
        pass
    err = open(os.path.join(tmp, name + ".err")).read().strip()
    check(False, f"resolved config '{name}' could not be read: {err}")
    return {"services": {}}

def cmd(svc):
    c = svc.get("command", "")
    return " ".join(c) if isinstance(c, list) else str(c)

def has_flags(svc, flags):
    words = cmd(svc).split()
    pairs = list(zip(words, words[1:]))
    missing = [f"{k} {v}" for k, v in flags if (k, v) not in pairs]
    return not missing, missing

def gpu(svc):
    devs = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    return any(d.get("driver") == "nvidia" and str(d.get("count")) == "1" and "gpu" in (d.get("capabilities") or [])
               for d in devs)

def published(svc):
    out = set()
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            out.add((str(p.get("published")), str(p.get("target"))))
        else:
            parts = str(p).split(":")
            out.add((parts[-2], parts[-1].split("/")[0]))
    return out

def volume_at(doc, svc, path):
    for v in svc.get("volumes") or []:
        if isinstance(v, dict):
            src, tgt, typ = v.get("source"), v.get("target"), v.get("type", "volume")
        else:
            parts = str(v).split(":")
            src, tgt = parts[0], parts[1] if len(parts) > 1 else ""
            typ = "bind" if src.startswith((".", "/", "~")) else "volume"
        if tgt == path and typ == "volume" and src in (doc.get("volumes") or {}):
            return src
    return None

def check_cmd(label, svc, flags):
    ok, missing = has_flags(svc, flags)
    check(ok, f"{label}: command has " + " ".join(f"{k} {v}" for k, v in flags)
          + ("" if ok else f" (missing {missing}; got '{cmd(svc)}')"))

def check_target(label, svc, target):
    b = svc.get("build") or {}
    check(b.get("target") == target and str(b.get("dockerfile", "")).endswith("docker/Dockerfile")
          and target in stages,
          f"{label}: builds Dockerfile target '{target}' (a stage of docker/Dockerfile)")

def check_trainer_cpu(label, d):
    s = d["services"]
    if "trainer-cpu" not in s:
        return
    t = s["trainer-cpu"]
    check(t.get("profiles") == ["cpu"], f"{label}: trainer-cpu is only in profile cpu ({t.get('profiles')})")
    check(not gpu(t), f"{label}: trainer-cpu reserves no GPU")
    check_cmd(f"{label} trainer-cpu", t, [("--device", "cpu")] + [f for f in trainer_flags if f[0] != "--device"])
    check(volume_at(d, t, "/out") == volume_at(d, s["trainer"], "/out"),
          f"{label}: trainer-cpu writes to the trainer's /out volume")
    check_target(f"{label} trainer-cpu", t, "trainer-cpu")

broker_flags = [("--listen", "tcp://0.0.0.0:7070"), ("--metrics", "http://0.0.0.0:9090")]
trainer_flags = [("--broker", "tcp://broker:7070"), ("--device", "auto"), ("--time-goal", "60"),
                 ("--weights", "/out/weights.safetensors"), ("--json", "/out/summary.json")]

# compose.yml: everything on one GPU box
d = load("all-default")
s = d["services"]
check(set(s) == {"broker", "producer", "trainer", "trainer-cpu"},
      f"compose.yml: services broker, producer, trainer, trainer-cpu ({sorted(s)})")
if {"broker", "producer", "trainer"} <= set(s):
    check_cmd("compose.yml broker", s["broker"], broker_flags + [("--queue-depth", "auto")])
    check_cmd("compose.yml producer", s["producer"], [("--broker", "tcp://broker:7070"), ("--delay", "0.05:0.5")])
    check_cmd("compose.yml trainer", s["trainer"], trainer_flags)
    r = (s["producer"].get("deploy") or {}).get("replicas")
    check(str(r) == "4", f"compose.yml: producer deploy.replicas defaults to 4 (got {r})")
    check("container_name" not in s["producer"] and not s["producer"].get("ports"),
          "compose.yml: replicated producer has no container_name and no fixed host port")
    check(gpu(s["trainer"]), "compose.yml: trainer reserves 1 nvidia device with capabilities [gpu]")
    check(not gpu(s["broker"]) and not gpu(s["producer"]), "compose.yml: only the trainer reserves a GPU")
    v = volume_at(d, s["trainer"], "/out")
    check(v is not None, f"compose.yml: trainer's /out is the named volume '{v}'")
    check({("7070", "7070"), ("9090", "9090")} <= published(s["broker"]),
          f"compose.yml: broker publishes 7070 and 9090 ({sorted(published(s['broker']))})")
    hc = (s["broker"].get("healthcheck") or {}).get("test") or []
    check("http://127.0.0.1:9090/status" in " ".join(hc if isinstance(hc, list) else [hc]),
          "compose.yml: broker healthcheck requests http://127.0.0.1:9090/status")
    for name, tgt in (("broker", "broker"), ("producer", "producer"), ("trainer", "trainer")):
        check_target(f"compose.yml {name}", s[name], tgt)

d = load("all-set")
s = d["services"]
if {"broker", "producer", "trainer"} <= set(s):
    r = (s["producer"].get("deploy") or {}).get("replicas")
    check(str(r) == "7", f"compose.yml: STOKER_PRODUCERS=7 gives deploy.replicas 7 (got {r})")
    check_cmd("compose.yml with STOKER_QUEUE_DEPTH=128", s["broker"], [("--queue-depth", "128")])
    check_cmd("compose.yml with STOKER_TIME_GOAL=5", s["trainer"], [("--time-goal", "5")])
    check_cmd("compose.yml with STOKER_DELAY=0:0", s["producer"], [("--delay", "0:0")])
    check(("19090", "9090") in published(s["broker"]), "compose.yml: STOKER_METRICS_PORT=19090 publishes 19090->9090")
    check(str(s["trainer"].get("image", "")).endswith(":t1"), "compose.yml: STOKER_TAG=t1 tags the images")

check_trainer_cpu("compose.yml", load("all-default"))

# compose.trainer.yml: GPU box of a cluster
d = load("trainer-default")
s = d["services"]
check(set(s) == {"broker", "trainer", "trainer-cpu"},
      f"compose.trainer.yml: services broker, trainer, trainer-cpu ({sorted(s)})")
if {"broker", "trainer"} <= set(s):
    check_cmd("compose.trainer.yml broker", s["broker"], broker_flags + [("--queue-depth", "auto")])
    check_cmd("compose.trainer.yml trainer", s["trainer"], trainer_flags)
    check({("7070", "7070"), ("9090", "9090")} <= published(s["broker"]),
          f"compose.trainer.yml: broker publishes 7070 and 9090 ({sorted(published(s['broker']))})")
    check(gpu(s["trainer"]), "compose.trainer.yml: trainer reserves 1 nvidia device with capabilities [gpu]")
    v = volume_at(d, s["trainer"], "/out")
    check(v is not None, f"compose.trainer.yml: trainer's /out is the named volume '{v}'")
    hc = (s["broker"].get("healthcheck") or {}).get("test") or []
    check("http://127.0.0.1:9090/status" in " ".join(hc if isinstance(hc, list) else [hc]),
          "compose.trainer.yml: broker healthcheck requests http://127.0.0.1:9090/status")
    check_target("compose.trainer.yml broker", s["broker"], "broker")
    check_target("compose.trainer.yml trainer", s["trainer"], "trainer")

check_trainer_cpu("compose.trainer.yml", d)

# compose.producers.yml: each CPU box
d = load("producers-default")
s = d["services"]
check(set(s) == {"producer"}, f"compose.producers.yml: only the producer service ({sorted(s)})")
if "producer" in s:
    check_cmd("compose.producers.yml producer", s["producer"],
              [("--broker", "tcp://10.0.0.5:7070"), ("--delay", "0.05:0.5")])
    r = (s["producer"].get("deploy") or {}).get("replicas")
    check(str(r) == "4", f"compose.producers.yml: deploy.replicas defaults to 4 (got {r})")
    check(not gpu(s["producer"]), "compose.producers.yml: producers reserve no GPU")
    check_target("compose.producers.yml producer", s["producer"], "producer")
s = load("producers-set")["services"]
if "producer" in s:
    r = (s["producer"].get("deploy") or {}).get("replicas")
    check(str(r) == "12", f"compose.producers.yml: STOKER_PRODUCERS=12 gives deploy.replicas 12 (got {r})")

# .env.example documents every variable the compose files use
used = set()
for f in ("compose.yml", "compose.trainer.yml", "compose.producers.yml"):
    with open(os.path.join(dd, f)) as fh:
        used |= set(re.findall(r"\$\{(\w+)", fh.read()))
with open(os.path.join(dd, ".env.example")) as fh:
    listed = set(re.findall(r"^\s*(\w+)=", fh.read(), re.M))
check(used <= listed, f".env.example lists every variable the compose files use ({len(used)})"
      + ("" if used <= listed else f": missing {sorted(used - listed)}"))

sys.exit(1 if failures else 0)
PYEOF
    [ $? -eq 0 ] || failures=$((failures + 1))
fi

if [ "$failures" -eq 0 ]; then
    echo "compose-files-validate: all checks passed"
    exit 0
fi
echo "compose-files-validate: FAILED"
exit 1
