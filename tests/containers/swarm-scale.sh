#!/usr/bin/env bash
# containers suite: stoker-scale's swarm engine for real. docker/stack.yml on a
# single-node Docker Swarm made for the test, with its `scale` service on (the controller, on the
# manager, the engine's socket mounted) and no trainer service: the trainer runs on the host, as
# a user's own training loop would, taking a fixed R examples/s through the node's port 7070
# (TLS and the token from the stack's secrets). Producers cost c = COST s per example. From 1
# replica the controller must bring the producer service within one of ceil(R x c x 1.2) within
# a minute and the trainer's data wait below 5 %; R halved, it scales down to within one of the
# new count; the controller's container killed, the replicas stay as they were and the
# controller swarm restarts reads them and goes on from there (no jump back to 1). Each change
# shows as a `scaled` event in /status. Over three minutes of steady demand after the scale-up,
# the replicas change direction at most twice. The broker's container killed, swarm restarts it
# on the same ports: the replicas stay as they were while it is away (the controller does not act
# on a missing signal, nor on a restarted broker's "no trainer has pulled yet"), the producers
# reconnect, the trainer gets batches again (data wait below 5 %) and the controller goes on
# from the replicas that stand. Skips where Docker or Swarm cannot run, or when the engine is
# already in a swarm (not the test's to change).
. "$(dirname "$0")/lib.sh"
containers_begin swarm-scale
command -v openssl > /dev/null 2>&1 || skip "openssl is not installed (scripts/deps.sh installs it)"
[ -n "${STOKER_LIB:-}" ] && [ -f "$STOKER_LIB" ] || skip "STOKER_LIB (libstoker.so for the host trainer) is not set: run it through meson test"
swarm_begin
stoker_images

S=stokerscale$$
RATE=100 COST=0.04
need() { python3 -c "import math, sys; print(math.ceil(float(sys.argv[1]) * $COST * 1.2))" "$1"; }
NEED=$(need $RATE)        # 5
NEED_HALF=$(need $((RATE / 2))) # 3
MAX=12
# Fixed free ports, not 0: a broker task swarm restarts must publish the same ports, or the host
# trainer (and this test) could not find it again. Taken below the kernel's ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range), so no other test's port 0 lands on them meanwhile.
free_port() {
    python3 -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(max(1024, lo - 12000), lo)
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            continue
        print(port)
        break'
}
MPORT=$(free_port)
BPORT=$(free_port)
while [ "$BPORT" = "$MPORT" ]; do BPORT=$(free_port); done
[ -n "$MPORT" ] && [ -n "$BPORT" ] || die "no free port below the ephemeral range for the broker"
export STOKER_OUT_VOLUME=stoker-test-out-$S STOKER_TRAINERS=0 STOKER_PRODUCERS=1 \
    STOKER_DELAY=$COST STOKER_METRICS_PORT=$MPORT STOKER_BROKER_PORT=$BPORT STOKER_SECRETS=$CT_TMP/secrets \
    STOKER_SCALE_REPLICAS=1 \
    STOKER_SCALE_OPTIONS="--interval 2 --cooldown 8 --max-step 4 --max $MAX --idle 600"

# Secrets: a token and a throwaway CA; the broker's certificate names `broker` (the overlay
# network) and 127.0.0.1 (the host trainer on the published port).
mkdir -p "$STOKER_SECRETS"
(
    cd "$STOKER_SECRETS" &&
        head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > token &&
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
            -out ca.crt -days 2 -subj /CN=stoker-test-ca &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout broker.key \
            -out broker.csr -subj /CN=broker &&
        printf 'subjectAltName=DNS:broker,IP:127.0.0.1\n' > broker.ext &&
        openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile broker.ext -out broker.crt
) > "$CT_TMP/openssl.log" 2>&1 || die "openssl: $(tail -n 5 "$CT_TMP/openssl.log")"

on_exit "docker volume rm -f $STOKER_OUT_VOLUME"
on_exit "docker stack rm $S; wait_until 60 stack_gone"
# On failure, what a reader needs to know why: each service's tasks (a restart shows as a
# task that failed or shut down), the broker's and the controller's last lines and the
# producers' warnings.
exec 3>&1
failure_context() {
    [ "$CT_FAILURES" -gt "${CT_FAILURES_SHOWN:-0}" ] || return 0
    {
        echo "--- on failure: the stack's tasks"
        docker stack ps --no-trunc --format '{{.Name}} {{.CurrentState}} {{.Error}}' "$S"
        echo "--- the broker's last log lines"
        docker service logs --tail 25 "${S}_broker" 2>&1
        echo "--- the controller's last log lines"
        docker service logs --tail 25 "${S}_scale" 2>&1
        echo "--- the producers' warnings and errors (a task that failed says why here)"
        docker service logs --tail 200 "${S}_producer" 2>&1 | grep -E " (WARN|ERROR) |rror" | tail -n 25
        echo "--- the trainer's log"
        tail -n 20 "$CT_TMP/trainer.log"
    } >&3 2>&1
}
on_exit failure_context

stack_gone() {
    [ -z "$(docker ps -aq --filter "label=com.docker.stack.namespace=$S")$(docker service ls -q --filter "label=com.docker.stack.namespace=$S")$(docker network ls -q --filter "label=com.docker.stack.namespace=$S")" ]
}
task_container() { docker ps -q --filter "label=com.docker.swarm.service.name=${S}_$1" | head -n 1; }
# Whether the running controller's log has a line matching $1. Read whole into a file first:
# under pipefail, `docker logs | grep -q` fails when grep stops reading at its match and docker
# logs, still writing, dies of the closed pipe.
scale_log_has() {
    docker logs "$(task_container scale)" > "$CT_TMP/scale.log" 2>&1
    grep -q "$1" "$CT_TMP/scale.log"
}
replicas() { docker service inspect --format '{{.Spec.Mode.Replicated.Replicas}}' "${S}_producer"; }
near() { local r; r=$(replicas) && [ "$r" -ge $(($1 - 1)) ] && [ "$r" -le $(($1 + 1)) ]; }
status() {
    curl -fsS -H "Authorization: Bearer $(cat "$STOKER_SECRETS/token")" "http://127.0.0.1:$mport/status" > "$CT_TMP/status.json"
}
status_has() { status && json_check "$CT_TMP/status.json" "$1"; }
# The trainer's data wait over its last 10 s (its stats file, one JSON line a second).
wait_share() { tail -n 1 "$CT_TMP/trainer.stats" 2>/dev/null | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["wait"])'; }
wait_below() { local w; w=$(wait_share) && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < $1 else 1)" "$w"; }
# fresh_wait_below BOUND AFTER: the last stats line was written after AFTER (the trainer's clock,
# CLOCK_MONOTONIC as `now` reads it), so the trainer got batches since, and its wait is below BOUND.
now() { python3 -c 'import time; print(time.monotonic())'; }
fresh_wait_below() {
    tail -n 1 "$CT_TMP/trainer.stats" 2> /dev/null | python3 -c 'import json, sys
j = json.loads(sys.stdin.read())
sys.exit(0 if j["at"] > float(sys.argv[2]) and j["wait"] < float(sys.argv[1]) else 1)' "$1" "$2"
}
# direction_changes N...: how often a series of counts turns (up then down, or down then up).
direction_changes() {
    python3 -c 'import sys
v = [int(x) for x in sys.argv[1:]]
d = [b - a for a, b in zip(v, v[1:]) if b != a]
print(sum(1 for a, b in zip(d, d[1:]) if (a > 0) != (b > 0)))' "$@"
}
# scaled_events: the scaled events in the last /status read, "from->to" each.
scaled_events() {
    python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
print(" ".join("%s->%s@%.0fs" % (e["from"], e["to"], e["at"]) for e in j["events"] if e["kind"] == "scaled"))' "$CT_TMP/status.json"
}
note "docker stack deploy -c docker/stack.yml $S (1 producer of $COST s, the controller)"
docker stack deploy -c "$CT_ROOT/docker/stack.yml" "$S" > "$CT_TMP/deploy.log" 2>&1 ||
    die "stack deploy: $(cat "$CT_TMP/deploy.log")"
check "the broker's task turns healthy" wait_until 90 eval 'is_healthy "$(task_container broker)"'
mport=$(host_port "$(task_container broker)" 9090)
bport=$(host_port "$(task_container broker)" 7070)
[ "$mport" = "$MPORT" ] && [ "$bport" = "$BPORT" ] ||
    die "the broker's ports are not published as asked (9090 on '$mport', not $MPORT; 7070 on '$bport', not $BPORT)"
check "the controller runs on the manager" wait_until 60 eval '[ -n "$(task_container scale)" ]'
wait_until 60 status_has 'j["producers_alive"] == 1' ||
    die "the producer did not join within 60 s: $(docker service logs --tail 5 "${S}_producer" 2>&1)"
check "1 producer replica before any demand ($(replicas))" [ "$(replicas)" = 1 ]

# The trainer: R examples/s in batches of 20 through the published port, never faster; the rate
# is read from a file each second; its data wait (the share of time in next_batch) over the last
# 10 s goes to its stats file.
echo $RATE > "$CT_TMP/rate"
cat > "$CT_TMP/trainer.py" << 'EOF'
import collections, json, sys, time
import stoker
url, secrets, rate_file, stats = sys.argv[1:5]
batch = 20
with stoker.Client(url, batch_size=batch, stall_timeout=120, token_file=secrets + "/token",
                   tls_ca=secrets + "/ca.crt") as c:
    window = collections.deque()  # (time, waited s, total s)
    t = next_write = time.monotonic()
    rate = float(open(rate_file).read())
    out = open(stats, "a")
    while True:
        t0 = time.monotonic()
        with c.next_batch():
            pass
        t1 = time.monotonic()
        t += batch / rate
        if t > time.monotonic():
            time.sleep(t - time.monotonic())
        t = max(t, time.monotonic() - 1)  # a starved trainer does not bank the time it lost
        t2 = time.monotonic()
        window.append((t2, t1 - t0, t2 - t0))
        while window and window[0][0] < t2 - 10:
            window.popleft()
        if t2 >= next_write:
            rate = float(open(rate_file).read())
            waited, total = sum(w for _, w, _ in window), sum(d for _, _, d in window)
            out.write(json.dumps({"at": t2, "rate": rate, "wait": waited / total}) + "\n")
            out.flush()
            next_write = t2 + 1
EOF
note "host trainer at $RATE examples/s on tls+tcp://127.0.0.1:$bport (needs ceil($RATE x $COST x 1.2) = $NEED producers)"
PYTHONPATH=$CT_ROOT/python /usr/bin/python3 "$CT_TMP/trainer.py" "tls+tcp://127.0.0.1:$bport" "$STOKER_SECRETS" \
    "$CT_TMP/rate" "$CT_TMP/trainer.stats" > "$CT_TMP/trainer.log" 2>&1 &
trainer=$!
on_exit "kill $trainer"
t0=$SECONDS
if wait_until 60 near "$NEED"; then
    pass "the controller brought the producers to $(replicas) (needed $NEED +- 1) in $((SECONDS - t0)) s"
else
    fail "producers at $(replicas) after 60 s, needed $NEED +- 1: $(docker service logs --tail 10 "${S}_scale" 2>&1)"
fi
check "the trainer's data wait falls below 5 %" wait_until 60 wait_below 0.05
note "data wait $(wait_share) with $(replicas) producers"
check "/status lists the controller's changes as scaled events (engine swarm)" \
    status_has "any(e['kind'] == 'scaled' and e['name'] == 'default' and '(swarm)' in e['reason'] for e in j['events'])"
kill -0 $trainer 2> /dev/null || die "the trainer died: $(tail -n 5 "$CT_TMP/trainer.log")"

# Steady demand: R held for three minutes, the replicas read every 2 s (the controller changes
# them at most every --cooldown 8 s, so no change falls between two readings).
STEADY=180
note "R steady at $RATE examples/s for $STEADY s: the producer replicas every 2 s"
series=()
t_end=$((SECONDS + STEADY))
while [ $SECONDS -lt $t_end ]; do
    series+=("$(replicas)")
    sleep 2
done
turns=$(direction_changes "${series[@]}")
echo "  replicas over $STEADY s: ${series[*]}"
status && echo "  scaled events since the start (the scale-up included): $(scaled_events)"
check "over $STEADY s of steady demand the replicas changed direction $turns time(s), at most 2" [ "$turns" -le 2 ]
note "data wait $(wait_share) with $(replicas) producers at the end of the steady demand"

note "R halved to $((RATE / 2)) examples/s (needs $NEED_HALF)"
echo $((RATE / 2)) > "$CT_TMP/rate"
t0=$SECONDS
if wait_until 90 near "$NEED_HALF"; then
    pass "the controller scaled down to $(replicas) (needed $NEED_HALF +- 1) in $((SECONDS - t0)) s"
else
    fail "producers at $(replicas) 90 s after R was halved, needed $NEED_HALF +- 1"
fi
check "data wait stays below 5 % after scaling down" wait_until 30 wait_below 0.05

before=$(replicas)
old=$(task_container scale)
note "docker kill the controller ($old) at $before replicas"
docker kill "$old" > /dev/null || fail "could not kill the controller's container"
check "the replicas stay at $before with the controller gone" [ "$(replicas)" = "$before" ]
restarted() { local c; c=$(task_container scale) && [ -n "$c" ] && [ "$c" != "$old" ]; }
check "swarm restarts the controller" wait_until 60 restarted
picked() { scale_log_has "service '${S}_producer' stands at $before replicas"; }
check "the restarted controller reads the $before replicas the service has" wait_until 30 picked
sleep 15
check "and goes on from there: $(replicas) producers (within one of $NEED_HALF), not back to 1" near "$NEED_HALF"
kill -0 $trainer 2> /dev/null || fail "the trainer died: $(tail -n 5 "$CT_TMP/trainer.log")"

# The broker killed: swarm restarts it (restart_policy any) on the same node and ports. The stack
# runs it without a state folder, so its queues and counters start empty; the producers keep
# what they pushed until it is trained (--retain) and wait for the broker (--broker-wait 600 s),
# and push it again to the new one; the trainer reconnects and drops what it already trained
# (docs/durability.md). The controller gets no signal while it is away and must change nothing,
# nor scale to the minimum on the new broker's "no trainer has pulled yet".
status || die "no /status before the broker's kill"
up_before=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["uptime_s"])' "$CT_TMP/status.json")
before=$(replicas)
oldb=$(task_container broker)
note "docker kill the broker ($oldb, up $up_before s) at $before replicas"
t_kill=$SECONDS
docker kill "$oldb" > /dev/null || fail "could not kill the broker's container"
# The new broker answers /status with an uptime shorter than the time since the kill.
broker_back() { status_has "j['uptime_s'] < $((SECONDS - t_kill + 1))"; }
away=()
until broker_back 2> /dev/null; do
    away+=("$(replicas)")
    [ $((SECONDS - t_kill)) -lt 120 ] || break
    sleep 1
done
broker_back || die "the broker was not back on port $MPORT within 120 s: $(docker service ps --no-trunc "${S}_broker" 2>&1 | tail -n 3)"
t_back=$(now)
pass "swarm restarted the broker: its /status answers $((SECONDS - t_kill)) s after the kill"
echo "  replicas while the broker was away: ${away[*]}"
check "the replicas stayed at $before while the broker was away" \
    python3 -c 'import sys; sys.exit(0 if all(x == sys.argv[1] for x in sys.argv[2:]) else 1)' "$before" "${away[@]}"
check "the restarted broker is a new one on the same ports (${bport} and ${mport})" \
    [ "$(host_port "$(task_container broker)" 7070)" = "$BPORT" ]
producers_back() { local r; r=$(replicas) && status_has "j['producers_alive'] == $r"; }
t0=$SECONDS
check "the restarted broker's /status shows the producers back within 60 s" wait_until 60 producers_back
note "producers alive at the new broker: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["producers_alive"])' "$CT_TMP/status.json") of $(replicas) replicas, $((SECONDS - t0)) s after it answered"
t0=$SECONDS
if wait_until 60 fresh_wait_below 0.05 "$t_back"; then
    pass "the trainer gets batches again from the new broker, data wait $(wait_share) < 5 %, $((SECONDS - t0)) s after the producers were back"
else
    fail "the trainer's data wait did not fall below 5 % within 60 s of the broker's return (last: $(tail -n 1 "$CT_TMP/trainer.stats"))"
fi
kill -0 $trainer 2> /dev/null || fail "the trainer died with the broker: $(tail -n 5 "$CT_TMP/trainer.log")"
check "the controller saw the broker restart and held (its broker-restarted line)" \
    scale_log_has "broker-restarted: .* the pools hold"
# Read for 40 s more: past the --down-window (30 s) after the restart in which the controller
# takes no step down, so a step it takes on the new broker's readings shows here.
after=()
t_end=$((SECONDS + 40))
while [ $SECONDS -lt $t_end ]; do
    after+=("$(replicas)")
    sleep 2
done
echo "  replicas after the broker's return: ${after[*]}"
check "no jump after the broker's return: every reading within one of $NEED_HALF (not back to 1, not to the max $MAX)" \
    python3 -c 'import sys; sys.exit(0 if all(abs(int(x) - int(sys.argv[1])) <= 1 for x in sys.argv[2:]) else 1)' "$NEED_HALF" "${after[@]}"
check "the controller goes on from the $before replicas that stand: $(replicas) (within one of $NEED_HALF)" \
    wait_until 30 near "$NEED_HALF"
status && echo "  scaled events at the new broker: $(scaled_events)"
kill -0 $trainer 2> /dev/null || fail "the trainer died: $(tail -n 5 "$CT_TMP/trainer.log")"
docker service logs "${S}_scale" 2>&1 | grep -E "scale: pool|broker-restarted|no signal" | sed 's/^/  /' | tail -n 20

failure_context
CT_FAILURES_SHOWN=$CT_FAILURES
note "docker stack rm $S"
kill $trainer 2> /dev/null
docker stack rm "$S" > "$CT_TMP/rm.log" 2>&1
check "stack rm removes the services, containers and network" wait_until 60 stack_gone
docker volume rm -f "$STOKER_OUT_VOLUME" > /dev/null
docker swarm leave --force > "$CT_TMP/leave.log" 2>&1
check "the node left the swarm" [ "$(docker info --format '{{.Swarm.LocalNodeState}}')" = inactive ]
containers_end
