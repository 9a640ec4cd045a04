#!/usr/bin/env bash
# containers suite: docker/stack.yml on a single-node Docker Swarm made for the test (`docker
# swarm init --advertise-addr 127.0.0.1`, the node labelled both GPU box and CPU box): TLS and
# the token come from swarm secrets, the broker and 2 producers run, the CPU trainer trains,
# `docker service scale` grows the producers to 6 while it trains and the trainer sees the 4 new
# ones join; scaling them to 0 ends the supply (exit 3, audit clean); `docker stack rm` removes
# everything and the node leaves the swarm. Skips when the engine is already in a swarm (it is
# not the test's to change).
. "$(dirname "$0")/lib.sh"
containers_begin swarm
command -v openssl > /dev/null 2>&1 || skip "openssl is not installed (scripts/deps.sh installs it)"
swarm_begin
stoker_images

S=stokerswarm$$
export STOKER_OUT_VOLUME=stoker-test-out-$S STOKER_TRAINER_IMAGE=stoker-trainer-cpu STOKER_DEVICE=cpu \
    STOKER_PRODUCERS=2 STOKER_DELAY=0.05:0.5 STOKER_TIME_GOAL=600 STOKER_METRICS_PORT=0 \
    STOKER_SECRETS=$CT_TMP/secrets STOKER_BROKER_PORT=0 STOKER_SCALE_REPLICAS=0
summary=$CT_TMP/summary.json

# Secrets: a token and a throwaway CA with the broker's certificate for the name `broker`.
mkdir -p "$STOKER_SECRETS"
(
    cd "$STOKER_SECRETS" &&
        head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > token &&
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
            -out ca.crt -days 2 -subj /CN=stoker-test-ca &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout broker.key \
            -out broker.csr -subj /CN=broker &&
        printf 'subjectAltName=DNS:broker\n' > broker.ext &&
        openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile broker.ext -out broker.crt
) > "$CT_TMP/openssl.log" 2>&1 || die "openssl: $(tail -n 5 "$CT_TMP/openssl.log")"

on_exit "docker volume rm -f $STOKER_OUT_VOLUME"
on_exit "docker stack rm $S; wait_until 60 stack_gone"

stack_things() {
    docker ps -aq --filter "label=com.docker.stack.namespace=$S"
    docker service ls -q --filter "label=com.docker.stack.namespace=$S"
    docker network ls -q --filter "label=com.docker.stack.namespace=$S"
    docker secret ls -q --filter "label=com.docker.stack.namespace=$S"
}
stack_gone() { [ -z "$(stack_things)" ]; }
task_container() { docker ps -q --filter "label=com.docker.swarm.service.name=${S}_$1" | head -n 1; }
status() {
    local b
    b=$(task_container broker)
    # /status asks for the broker's token (the stack's secret) as a bearer header.
    [ -n "$b" ] && docker exec "$b" sh -c 'curl -fsS -H "Authorization: Bearer $(cat /run/secrets/stoker_token)" http://127.0.0.1:9090/status' > "$CT_TMP/status.json"
}
status_has() { status && json_check "$CT_TMP/status.json" "$1"; }

note "docker stack deploy -c docker/stack.yml $S (2 producers)"
docker stack deploy -c "$CT_ROOT/docker/stack.yml" "$S" > "$CT_TMP/deploy.log" 2>&1 ||
    die "stack deploy: $(cat "$CT_TMP/deploy.log")"
check "stack services: broker, producer, scale (0 replicas: scaled by hand here), trainer" \
    [ "$(docker service ls --format '{{.Name}}' --filter "label=com.docker.stack.namespace=$S" | sort | tr '\n' ' ')" = \
    "${S}_broker ${S}_producer ${S}_scale ${S}_trainer " ]
check "the broker's task turns healthy" wait_until 90 eval 'is_healthy "$(task_container broker)"'
wait_until 60 status_has 'j["producers_alive"] == 2' ||
    die "2 producers did not join within 60 s: $(docker service logs --tail 5 "${S}_producer" 2>&1)"
pass "2 producers joined over TLS with the token (secrets)"
wait_until 90 status_has 'j["trainers"] == 1 and j["counters"]["acknowledged"] > 30' ||
    die "the trainer did not train within 90 s: $(docker service logs --tail 5 "${S}_trainer" 2>&1)"
pass "the trainer trains"
trainer=$(task_container trainer)
for svc in broker producer trainer; do
    c=$(task_container $svc)
    uids=$(uids_in "$c")
    check "$svc task runs as uid 10001 only ($uids)" [ "$uids" = 10001 ]
done
mport=$(host_port "$(task_container broker)" 9090)
# With --token-file, /metrics asks for the token as a bearer header (docs/monitoring.md).
curl -fsS -H "Authorization: Bearer $(cat "$STOKER_SECRETS/token")" \
    "http://127.0.0.1:$mport/metrics" > "$CT_TMP/metrics" 2>&1
check "/metrics on the node's published port $mport (mode host), with the token" \
    grep -q '^stoker_produced_total' "$CT_TMP/metrics"
code=$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/metrics")
check "/metrics without the token: 401 (got $code)" [ "$code" = 401 ]

note "docker service scale ${S}_producer=6 while the trainer trains"
docker service scale "${S}_producer=6" > "$CT_TMP/scale.log" 2>&1 || fail "service scale to 6: $(tail -n 5 "$CT_TMP/scale.log")"
check "6 producers alive at the broker" wait_until 90 status_has 'j["producers_alive"] == 6'
joined() { [ "$(docker logs "$trainer" 2>&1 | grep -c "INFO producer [0-9]* '.*' joined")" -ge 4 ]; }
check "the trainer logs the 4 new producers joining" wait_until 30 joined
check "the trainer is still training" is_running "$trainer"

note "docker service scale ${S}_producer=0: the supply ends"
docker service scale "${S}_producer=0" > "$CT_TMP/scale0.log" 2>&1 || fail "service scale to 0: $(tail -n 5 "$CT_TMP/scale0.log")"
check "the trainer stops by itself once the supply ended" wait_until 90 is_stopped "$trainer"
rc=$(exit_code "$trainer")
check "trainer exit code 3, supply ended (got $rc)" [ "$rc" = 3 ]
volume_cat "$STOKER_OUT_VOLUME" summary.json > "$summary" || die "no summary.json in volume $STOKER_OUT_VOLUME"
cat "$summary"
check "summary: status supply_ended, 4 producer_joined events, 6 finished" \
    json_check "$summary" "j['status'] == 'supply_ended' and sum(e['kind'] == 'producer_joined' for e in j['events']) >= 4 and sum(e['kind'] == 'producer_finished' for e in j['events']) == 6"
check "summary: discrepancy 0, duplicates 0" \
    json_check "$summary" 'j["audit"]["discrepancy"] == 0 and j["audit"]["duplicates_seen"] == 0'

note "docker stack rm $S"
docker stack rm "$S" > "$CT_TMP/rm.log" 2>&1
check "stack rm removes the services, containers, network and secrets" wait_until 60 stack_gone
docker volume rm -f "$STOKER_OUT_VOLUME" > /dev/null
docker swarm leave --force > "$CT_TMP/leave.log" 2>&1
check "the node left the swarm" [ "$(docker info --format '{{.Swarm.LocalNodeState}}')" = inactive ]
containers_end
