#!/usr/bin/env bash
# containers suite: stoker-scale's swarm engine for real (issue 28). docker/stack.yml on a
# single-node Docker Swarm made for the test, with its `scale` service on (the controller, on the
# manager, the engine's socket mounted) and no trainer service: the trainer runs on the host, as
# a user's own training loop would, taking a fixed R examples/s through the node's port 7070
# (TLS and the token from the stack's secrets). Producers cost c = COST s per example. From 1
# replica the controller must bring the producer service within one of ceil(R x c x 1.2) within
# a minute and the trainer's data wait below 5 %; R halved, it scales down to within one of the
# new count; the controller's container killed, the replicas stay as they were and the
# controller swarm restarts reads them and goes on from there (no jump back to 1). Each change
# shows as a `scaled` event in /status. Skips where Docker or Swarm cannot run, or when the
# engine is already in a swarm (not the test's to change).
. "$(dirname "$0")/lib.sh"
containers_begin swarm-scale
command -v openssl > /dev/null 2>&1 || skip "openssl is not installed (scripts/deps.sh installs it)"
[ -n "${STOKER_LIB:-}" ] && [ -f "$STOKER_LIB" ] || skip "STOKER_LIB (libstoker.so for the host trainer) is not set: run it through meson test"
state=$(docker info --format '{{.Swarm.LocalNodeState}}')
[ "$state" = inactive ] || skip "this Docker engine is already in a swarm ($state); the test makes its own"
stoker_images

S=stokerscale$$
RATE=100 COST=0.04
need() { python3 -c "import math, sys; print(math.ceil(float(sys.argv[1]) * $COST * 1.2))" "$1"; }
NEED=$(need $RATE)        # 5
NEED_HALF=$(need $((RATE / 2))) # 3
export STOKER_OUT_VOLUME=stoker-test-out-$S STOKER_TRAINERS=0 STOKER_PRODUCERS=1 \
    STOKER_DELAY=$COST STOKER_METRICS_PORT=0 STOKER_BROKER_PORT=0 STOKER_SECRETS=$CT_TMP/secrets \
    STOKER_SCALE_REPLICAS=1 \
    STOKER_SCALE_OPTIONS="--interval 2 --cooldown 8 --max-step 4 --max 12 --idle 600"

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

note "docker swarm init --advertise-addr 127.0.0.1"
docker swarm init --advertise-addr 127.0.0.1 > "$CT_TMP/swarm.log" 2>&1 || skip "Swarm cannot run here: $(cat "$CT_TMP/swarm.log")"
on_exit "docker swarm leave --force"
on_exit "docker volume rm -f $STOKER_OUT_VOLUME"
on_exit "docker stack rm $S; wait_until 60 stack_gone"
node=$(docker info --format '{{.Swarm.NodeID}}')
docker node update --label-add stoker.gpu=true --label-add stoker.cpu=true "$node" > /dev/null ||
    die "could not label the node"

stack_gone() {
    [ -z "$(docker ps -aq --filter "label=com.docker.stack.namespace=$S")$(docker service ls -q --filter "label=com.docker.stack.namespace=$S")$(docker network ls -q --filter "label=com.docker.stack.namespace=$S")" ]
}
task_container() { docker ps -q --filter "label=com.docker.swarm.service.name=${S}_$1" | head -n 1; }
replicas() { docker service inspect --format '{{.Spec.Mode.Replicated.Replicas}}' "${S}_producer"; }
near() { local r; r=$(replicas) && [ "$r" -ge $(($1 - 1)) ] && [ "$r" -le $(($1 + 1)) ]; }
status() {
    curl -fsS -H "Authorization: Bearer $(cat "$STOKER_SECRETS/token")" "http://127.0.0.1:$mport/status" > "$CT_TMP/status.json"
}
status_has() { status && json_check "$CT_TMP/status.json" "$1"; }
# The trainer's data wait over its last 10 s (its stats file, one JSON line a second).
wait_share() { tail -n 1 "$CT_TMP/trainer.stats" 2>/dev/null | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["wait"])'; }
wait_below() { local w; w=$(wait_share) && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < $1 else 1)" "$w"; }

note "docker stack deploy -c docker/stack.yml $S (1 producer of $COST s, the controller)"
docker stack deploy -c "$CT_ROOT/docker/stack.yml" "$S" > "$CT_TMP/deploy.log" 2>&1 ||
    die "stack deploy: $(cat "$CT_TMP/deploy.log")"
check "the broker's task turns healthy" wait_until 90 eval 'is_healthy "$(task_container broker)"'
mport=$(host_port "$(task_container broker)" 9090)
bport=$(host_port "$(task_container broker)" 7070)
[ -n "$mport" ] && [ -n "$bport" ] || die "the broker's ports are not published (9090: '$mport', 7070: '$bport')"
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
check "the trainer's data wait falls below 5 % (now $(wait_share))" wait_until 60 wait_below 0.05
note "data wait $(wait_share) with $(replicas) producers"
check "/status lists the controller's changes as scaled events (engine swarm)" \
    status_has "any(e['kind'] == 'scaled' and e['name'] == 'default' and '(swarm)' in e['reason'] for e in j['events'])"
kill -0 $trainer 2> /dev/null || die "the trainer died: $(tail -n 5 "$CT_TMP/trainer.log")"

note "R halved to $((RATE / 2)) examples/s (needs $NEED_HALF)"
echo $((RATE / 2)) > "$CT_TMP/rate"
t0=$SECONDS
if wait_until 90 near "$NEED_HALF"; then
    pass "the controller scaled down to $(replicas) (needed $NEED_HALF +- 1) in $((SECONDS - t0)) s"
else
    fail "producers at $(replicas) 90 s after R was halved, needed $NEED_HALF +- 1"
fi
check "data wait stays below 5 % after scaling down (now $(wait_share))" wait_until 30 wait_below 0.05

before=$(replicas)
old=$(task_container scale)
note "docker kill the controller ($old) at $before replicas"
docker kill "$old" > /dev/null || fail "could not kill the controller's container"
check "the replicas stay at $before with the controller gone" [ "$(replicas)" = "$before" ]
restarted() { local c; c=$(task_container scale) && [ -n "$c" ] && [ "$c" != "$old" ]; }
check "swarm restarts the controller" wait_until 60 restarted
picked() { docker logs "$(task_container scale)" 2>&1 | grep -q "service '${S}_producer' stands at $before replicas"; }
check "the restarted controller reads the $before replicas the service has" wait_until 30 picked
sleep 15
check "and goes on from there: $(replicas) producers (within one of $NEED_HALF), not back to 1" near "$NEED_HALF"
kill -0 $trainer 2> /dev/null || fail "the trainer died: $(tail -n 5 "$CT_TMP/trainer.log")"
docker service logs "${S}_scale" 2>&1 | grep "scale: pool" | sed 's/^/  /' | tail -n 12

note "docker stack rm $S"
kill $trainer 2> /dev/null
docker stack rm "$S" > "$CT_TMP/rm.log" 2>&1
check "stack rm removes the services, containers and network" wait_until 60 stack_gone
docker volume rm -f "$STOKER_OUT_VOLUME" > /dev/null
docker swarm leave --force > "$CT_TMP/leave.log" 2>&1
check "the node left the swarm" [ "$(docker info --format '{{.Swarm.LocalNodeState}}')" = inactive ]
containers_end
