# Shared by the containers suite's scripts (bash, sourced): the Docker engine, the local base
# image, the stoker images, compose projects, checks and cleanup. It does not run any test itself.
#
# Lifecycle, for each script:  . lib.sh; containers_begin NAME; ...checks...; containers_end
#   containers_begin  takes the suite's lock (scripts run one at a time, also across checkouts),
#                     skips (exit 77) with the reason when no engine can be had, starts `dockerd`
#                     when none answers and stops exactly that process (by PID) on exit, also on
#                     failure; registered cleanups (on_exit) run before it.
#   base_image        stoker-base:bookworm, debootstrap --variant=minbase + docker import, made
#                     once and reused (cached by tag).
#   stoker_images     builds the broker, producer and trainer-cpu targets of docker/Dockerfile on
#                     the local base, one at a time under nice; the build cache makes it quick
#                     when nothing changed. Tags: stoker-<target>:$STOKER_TAG (default "test").
# Images stay after the suite (they are the cache); containers, networks, volumes and swarm
# state it made are removed.
set -uo pipefail

CT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CT_BASE=stoker-base:bookworm
export STOKER_TAG=${STOKER_CONTAINERS_TAG:-test}
export STOKER_REGISTRY=
CT_FAILURES=0
CT_DOCKERD_PID=
CT_CLEANUPS=()
CT_TMP=$(mktemp -d /tmp/stoker-containers.XXXXXX)
CT_T0=$(date +%s)

note() { printf '[%4ss] %s\n' "$(($(date +%s) - CT_T0))" "$*"; }
pass() { echo "ok:   $*"; }
fail() {
    echo "FAIL: $*"
    CT_FAILURES=$((CT_FAILURES + 1))
}
# check DESCRIPTION COMMAND...: pass or fail by the command's status.
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
# die MESSAGE: a failure after which the script cannot go on.
die() {
    fail "$*"
    exit 1
}
skip() {
    echo "SKIP: $*"
    exit 77
}
# on_exit COMMAND: run COMMAND (a string, eval'd) when the script ends, last registered first.
on_exit() { CT_CLEANUPS=("$1" "${CT_CLEANUPS[@]}"); }

ct_exit() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    for c in "${CT_CLEANUPS[@]}"; do
        eval "$c" >> "$CT_TMP/cleanup.log" 2>&1
    done
    if [ -n "$CT_DOCKERD_PID" ]; then
        kill -TERM "$CT_DOCKERD_PID" 2>/dev/null
        for _ in $(seq 1 60); do
            kill -0 "$CT_DOCKERD_PID" 2>/dev/null || break
            sleep 0.5
        done
        if kill -0 "$CT_DOCKERD_PID" 2>/dev/null; then
            echo "dockerd $CT_DOCKERD_PID did not stop within 30 s: killed"
            kill -KILL "$CT_DOCKERD_PID" 2>/dev/null
        fi
        wait "$CT_DOCKERD_PID" 2>/dev/null
        note "stopped the dockerd this test started (pid $CT_DOCKERD_PID)"
    fi
    rm -rf "$CT_TMP"
    exit "$rc"
}

# wait_until SECONDS COMMAND...: true as soon as COMMAND succeeds, false after SECONDS.
wait_until() {
    local limit=$1 t0=$SECONDS
    shift
    while ! "$@" >/dev/null 2>&1; do
        [ $((SECONDS - t0)) -lt "$limit" ] || return 1
        sleep 1
    done
}

containers_begin() {
    CT_NAME=$1
    trap ct_exit EXIT
    trap 'exit 130' INT TERM
    command -v docker > /dev/null 2>&1 ||
        skip "no docker CLI (apt-get install docker.io, as scripts/deps.sh does when run as root)"
    if [ "$(id -u)" -ne 0 ] && ! docker info > /dev/null 2>&1; then
        skip "no Docker engine answers and starting one needs root"
    fi
    # One containers test at a time on this machine (a read-only descriptor is enough for flock).
    local lock=/tmp/stoker-containers.lock
    [ -e "$lock" ] || : >> "$lock"
    exec 9< "$lock" || die "cannot open $lock"
    if ! flock -w 1800 9; then die "another containers test held $lock for 30 min"; fi
    if docker info > /dev/null 2>&1; then
        note "using the running Docker engine ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    else
        [ "$(id -u)" -eq 0 ] || skip "no Docker engine answers and starting one needs root"
        command -v dockerd > /dev/null 2>&1 || skip "no Docker engine answers and dockerd is not installed (docker.io)"
        # In a session of its own: a signal to the test's process group (meson's timeout) must
        # reach the test, whose cleanup removes its containers first and then stops dockerd.
        setsid dockerd > "$CT_TMP/dockerd.log" 2>&1 &
        CT_DOCKERD_PID=$!
        if ! wait_until 60 docker info; then
            tail -n 20 "$CT_TMP/dockerd.log"
            skip "dockerd (pid $CT_DOCKERD_PID) did not answer within 60 s (log above)"
        fi
        note "started dockerd $(docker version --format '{{.Server.Version}}' 2>/dev/null) (pid $CT_DOCKERD_PID)"
    fi
    remove_leftovers
    if command -v docker-compose > /dev/null 2>&1; then
        CT_COMPOSE=(docker-compose)
    elif docker compose version > /dev/null 2>&1; then
        CT_COMPOSE=(docker compose)
    else
        skip "no docker-compose"
    fi
    : > "$CT_TMP/empty.env"
}

# remove_leftovers: what an earlier run of this suite left when it was killed outright (its
# compose projects and stacks are named stoker{one,gpu,cpu,swarm}PID, volumes stoker-test-out-*).
remove_leftovers() {
    local c n v
    c=$(docker ps -aq --filter label=com.docker.compose.project | while read -r id; do
        docker inspect --format '{{index .Config.Labels "com.docker.compose.project"}} {{.ID}}' "$id"
    done | awk '$1 ~ /^stoker(one|gpu|cpu)[0-9]+$/ { print $2 }')
    [ -z "$c" ] || { note "removing containers left by an earlier run: $(echo $c)"; docker rm -f $c > /dev/null; }
    n=$(docker network ls --format '{{.Name}}' | grep -E '^stoker(one|gpu|cpu)[0-9]+_default$')
    [ -z "$n" ] || docker network rm $n > /dev/null
    v=$(docker volume ls -q | grep -E '^stoker-test-out-')
    [ -z "$v" ] || docker volume rm -f $v > /dev/null
}

# swarm_begin: a single-node swarm of the test's own, made now and left when the test ends,
# its node labelled stoker.test=true. A swarm such a test left behind (its run stopped before
# its cleanup: the node carries that label) is left first; any other swarm is not the test's
# to change, and the test skips.
swarm_begin() {
    local state
    state=$(docker info --format '{{.Swarm.LocalNodeState}}')
    if [ "$state" = active ] &&
        [ "$(docker node inspect self --format '{{index .Spec.Labels "stoker.test"}}' 2> /dev/null)" = true ]; then
        note "leaving the swarm an earlier run of this suite left (its node is labelled stoker.test)"
        docker swarm leave --force > /dev/null 2>&1 || die "could not leave the swarm an earlier run left"
        state=$(docker info --format '{{.Swarm.LocalNodeState}}')
    fi
    [ "$state" = inactive ] || skip "this Docker engine is already in a swarm ($state); the test makes its own"
    note "docker swarm init --advertise-addr 127.0.0.1"
    docker swarm init --advertise-addr 127.0.0.1 > "$CT_TMP/swarm.log" 2>&1 ||
        skip "Swarm cannot run here: $(cat "$CT_TMP/swarm.log")"
    on_exit "docker swarm leave --force"
    CT_SWARM_NODE=$(docker info --format '{{.Swarm.NodeID}}')
    docker node update --label-add stoker.test=true --label-add stoker.gpu=true \
        --label-add stoker.cpu=true "$CT_SWARM_NODE" > /dev/null || die "could not label the node"
}

containers_end() {
    note "$CT_NAME: $CT_FAILURES failure(s)"
    [ "$CT_FAILURES" -eq 0 ] || exit 1
    exit 0
}

base_image() {
    if docker image inspect "$CT_BASE" > /dev/null 2>&1; then
        note "base image $CT_BASE: cached"
        return 0
    fi
    command -v debootstrap > /dev/null 2>&1 || die "debootstrap is not installed (scripts/deps.sh installs it)"
    local mirror rootfs=$CT_TMP/rootfs
    mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
    [ -n "$mirror" ] || mirror=$(awk '/^deb / { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
    mirror=${mirror:-http://deb.debian.org/debian}
    note "making $CT_BASE: debootstrap --variant=minbase bookworm from $mirror"
    if ! nice -n 10 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$CT_TMP/debootstrap.log" 2>&1; then
        tail -n 20 "$CT_TMP/debootstrap.log"
        die "debootstrap failed (log above)"
    fi
    # Slim it as debian:bookworm-slim is: apt's lists and caches (each image's apt-get update
    # fetches them again), and no documentation, manuals or translations, now or installed later.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
        "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
        "$rootfs"/usr/share/locale/*
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
        'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
        > "$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim"
    printf '%s\n' 'APT::Install-Recommends "false";' > "$rootfs/etc/apt/apt.conf.d/docker-slim"
    tar -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' - "$CT_BASE" > /dev/null || die "docker import of the base failed"
    rm -rf "$rootfs"
    note "base image $CT_BASE: $(image_size "$CT_BASE")"
}

# image_size IMAGE: its size in MB as the engine reports it.
image_size() {
    docker image inspect --format '{{.Size}}' "$1" | awk '{ printf "%d MB", $1 / 1000000 }'
}

# build_target TARGET [--build-arg ...]: docker build of one Dockerfile target, tagged
# stoker-TARGET:$STOKER_TAG; the log is printed only on failure.
build_target() {
    local target=$1 t0=$SECONDS
    shift
    if ! (cd "$CT_ROOT" && nice -n 10 docker build -f docker/Dockerfile --target "$target" \
        -t "stoker-$target:$STOKER_TAG" "$@" .) > "$CT_TMP/build-$target.log" 2>&1; then
        tail -n 40 "$CT_TMP/build-$target.log"
        die "docker build --target $target failed (log above)"
    fi
    note "built stoker-$target:$STOKER_TAG in $((SECONDS - t0)) s: $(image_size "stoker-$target:$STOKER_TAG")"
}

stoker_images() {
    base_image
    local t
    # The build stage tagged too: it stays the cache, and what an earlier build left untagged can go.
    for t in build broker producer trainer-cpu scale; do
        build_target "$t" --build-arg DEBIAN_IMAGE="$CT_BASE"
    done
    prune_leftovers
}

# prune_leftovers: untagged images of earlier builds of docker/Dockerfile (by its label); the
# current ones are tagged or parents of tagged ones and stay.
prune_leftovers() {
    docker image prune -f --filter label=org.stoker.dockerfile > "$CT_TMP/prune.log" 2>&1
    local freed
    freed=$(awk '/^Total reclaimed space/ { print $4 }' "$CT_TMP/prune.log")
    [ -z "$freed" ] || [ "$freed" = 0B ] || note "pruned untagged images of earlier builds: $freed"
}

# compose PROJECT FILE... -- ARGS...: docker-compose on docker/FILEs with an empty env file, so
# a user's docker/.env cannot change what the test runs.
compose() {
    local project=$1 files=()
    shift
    while [ "$1" != "--" ]; do
        files+=(-f "$CT_ROOT/docker/$1")
        shift
    done
    shift
    "${CT_COMPOSE[@]}" --env-file "$CT_TMP/empty.env" -p "$project" "${files[@]}" "$@"
}

# container_of PROJECT SERVICE [N]: the id of a compose service's Nth container (default 1).
container_of() {
    docker ps -aq --filter "label=com.docker.compose.project=$1" \
        --filter "label=com.docker.compose.service=$2" \
        --filter "label=com.docker.compose.container-number=${3:-1}"
}

has_container() { [ -n "$(container_of "$@")" ]; }
# running_in PROJECT: names of the project's running containers, one a line.
running_in() { docker ps --format '{{.Names}}' --filter "label=com.docker.compose.project=$1"; }
none_running_in() { [ -z "$(running_in "$1")" ]; }

# host_port CONTAINER PORT: the host port a container's PORT/tcp is published on.
host_port() {
    docker port "$1" "$2/tcp" | awk -F: 'NR == 1 { print $NF }'
}

health_of() { docker inspect --format '{{.State.Health.Status}}' "$1" 2>/dev/null; }
is_healthy() { [ "$(health_of "$1")" = healthy ]; }

# uids_in CONTAINER: the distinct uids its processes run as (from ps on the host, not from the
# image's configuration).
uids_in() {
    docker top "$1" -o pid,uid | awk 'NR > 1 { print $2 }' | sort -u | tr '\n' ' ' | sed 's/ $//'
}

# volume_cat VOLUME FILE: a file read out of a named volume with a throwaway container.
volume_cat() {
    docker run --rm -v "$1:/out:ro" "$CT_BASE" cat "/out/$2"
}

# json_check FILE PYTHON-EXPRESSION: true when the expression over `j` (the parsed file) holds.
json_check() {
    python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
}

# exit_code CONTAINER: the exit code of a stopped container.
exit_code() { docker inspect --format '{{.State.ExitCode}}' "$1"; }
is_running() { [ "$(docker inspect --format '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
is_stopped() { [ "$(docker inspect --format '{{.State.Running}}' "$1" 2>/dev/null)" = false ]; }

# cuda_toolkit: true when the host has a CUDA toolkit at /usr/local/cuda with nvcc, the headers,
# cudart and cuBLAS (sets CT_CUDA, its real folder, and CT_CUDA_LIB); else prints what is missing.
cuda_toolkit() {
    CT_CUDA=$(readlink -f /usr/local/cuda 2>/dev/null)
    local f
    for f in bin/nvcc include/cuda_runtime.h include/cublas_v2.h; do
        [ -e "$CT_CUDA/$f" ] || { echo "no CUDA toolkit: /usr/local/cuda/$f is missing"; return 1; }
    done
    CT_CUDA_LIB=$(readlink -f "$CT_CUDA/lib64")
    [ -e "$CT_CUDA_LIB/libcudart.so" ] || CT_CUDA_LIB=$CT_CUDA/lib
    [ -e "$CT_CUDA_LIB/libcudart.so" ] && [ -e "$CT_CUDA_LIB/libcublas.so" ] ||
        { echo "no CUDA toolkit: libcudart.so or libcublas.so missing under $CT_CUDA"; return 1; }
}

# cuda_bases: stoker-cuda:runtime and stoker-cuda:devel (tests/containers/cuda-base.Dockerfile)
# from the host's CUDA toolkit (cuda_toolkit must have succeeded), made once (cached by tag).
cuda_bases() {
    if docker image inspect stoker-cuda:runtime stoker-cuda:devel > /dev/null 2>&1; then
        note "CUDA bases stoker-cuda:runtime and stoker-cuda:devel: cached"
        return 0
    fi
    local cuda=$CT_CUDA lib=$CT_CUDA_LIB dir ctx=$CT_TMP/cuda-ctx
    dir=$(basename "$cuda")
    base_image
    note "making the CUDA bases from $cuda (${dir})"
    mkdir -p "$ctx/runtime/${lib#"$cuda"/}" "$ctx/devel/${lib#"$cuda"/}"
    # Hard links where /tmp and the toolkit share a file system (no copy of 600 MB), else copies.
    cp -al "$lib"/libcudart.so* "$lib"/libcublas.so* "$lib"/libcublasLt.so* "$ctx/runtime/${lib#"$cuda"/}/" 2> /dev/null ||
        cp -a "$lib"/libcudart.so* "$lib"/libcublas.so* "$lib"/libcublasLt.so* "$ctx/runtime/${lib#"$cuda"/}/"
    for l in lib64 lib targets; do
        [ -L "$cuda/$l" ] && cp -P "$cuda/$l" "$ctx/runtime/"
    done
    [ -d "$cuda/targets" ] && [ ! -L "$cuda/targets" ] && cp -a "$cuda/targets" "$ctx/runtime/" 2> /dev/null
    for d in bin nvvm include; do
        cp -al "$cuda/$d" "$ctx/devel/" 2> /dev/null || cp -a "$cuda/$d" "$ctx/devel/"
    done
    cp -a "$lib"/libcudart_static.a "$lib"/libcudadevrt.a "$ctx/devel/${lib#"$cuda"/}/" 2> /dev/null
    [ -d "$lib/stubs" ] && cp -a "$lib/stubs" "$ctx/devel/${lib#"$cuda"/}/"
    cp "$CT_ROOT/tests/containers/cuda-base.Dockerfile" "$ctx/Dockerfile"
    local t
    for t in runtime devel; do
        if ! nice -n 10 docker build --target "$t" --build-arg BASE="$CT_BASE" --build-arg CUDA_DIR="$dir" \
            -t "stoker-cuda:$t" "$ctx" > "$CT_TMP/build-cuda-$t.log" 2>&1; then
            tail -n 20 "$CT_TMP/build-cuda-$t.log"
            rm -rf "$ctx"
            die "building the CUDA base stoker-cuda:$t failed (log above)"
        fi
        note "CUDA base stoker-cuda:$t: $(image_size "stoker-cuda:$t")"
    done
    rm -rf "$ctx"
}
