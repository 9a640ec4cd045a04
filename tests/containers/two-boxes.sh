#!/usr/bin/env bash
# containers suite: the cluster's two roles as separate compose projects, as on two machines:
# docker/compose.trainer.yml (broker + CPU trainer) and docker/compose.producers.yml (3
# producers) reaching the broker through the host's address and its published port, never the
# project network. `docker kill` of one producer shows as producer_lost while training goes on;
# `down` of the producers project makes them say goodbye and the trainer exits 3 (supply ended)
# with its weights saved.
. "$(dirname "$0")/lib.sh"
containers_begin two-boxes
stoker_images

PT=stokergpu$$ PP=stokercpu$$
export STOKER_OUT_VOLUME=stoker-test-out-$PT STOKER_BROKER_PORT=0 STOKER_METRICS_PORT=0 \
    STOKER_PRODUCERS=3 STOKER_DELAY=0.05:0.5 STOKER_TIME_GOAL=600
on_exit "compose $PP compose.producers.yml -- down --remove-orphans -t 10"
on_exit "compose $PT compose.trainer.yml -- --profile cpu down -v --remove-orphans -t 10"
summary=$CT_TMP/summary.json

note "trainer box: up -d broker"
compose $PT compose.trainer.yml -- up -d broker > "$CT_TMP/up-broker.log" 2>&1 ||
    die "up -d broker: $(tail -n 20 "$CT_TMP/up-broker.log")"
broker=$(container_of $PT broker)
check "broker's health check turns healthy" wait_until 60 is_healthy "$broker"
bport=$(host_port "$broker" 7070)
mport=$(host_port "$broker" 9090)
# The host's own address, as another machine would use it (not the project's network).
host=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1) }')
[ -n "$host" ] || host=$(hostname -I | awk '{ print $1 }')
[ -n "$host" ] || die "no host address found for the producers to reach the broker"
export STOKER_BROKER=tcp://$host:$bport
note "producers box: up -d, STOKER_BROKER=$STOKER_BROKER (metrics on $host:$mport)"
compose $PP compose.producers.yml -- up -d > "$CT_TMP/up-producers.log" 2>&1 ||
    die "up -d producers: $(tail -n 20 "$CT_TMP/up-producers.log")"

status() { curl -fsS "http://$host:$mport/status" > "$CT_TMP/status.json"; }
status_has() { status && json_check "$CT_TMP/status.json" "$1"; }
acked() { status && python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["counters"]["acknowledged"])' "$CT_TMP/status.json"; }
check "3 producers from the other project joined through $host:$bport" \
    wait_until 60 status_has 'j["producers_alive"] == 3'

note "trainer box: --profile cpu up -d trainer-cpu"
compose $PT compose.trainer.yml -- --profile cpu up -d trainer-cpu > "$CT_TMP/up-trainer.log" 2>&1 ||
    die "up -d trainer-cpu: $(tail -n 20 "$CT_TMP/up-trainer.log")"
trainer=$(container_of $PT trainer-cpu)
trains() { [ "$(acked)" -gt "$1" ]; }
check "the trainer trains (acknowledged > 40)" wait_until 90 trains 40

victim=$(container_of $PP producer 2)
vhost=$(docker inspect --format '{{.Config.Hostname}}' "$victim")
note "docker kill of producer #2 (hostname $vhost; its producer name is $vhost-PID)"
docker kill "$victim" > /dev/null
lost_in_status() {
    status_has "any(e['kind'] == 'producer_lost' and e['name'].startswith('$vhost-') for e in j['events'])"
}
check "the broker reports producer_lost for the killed container" wait_until 30 lost_in_status
before=$(acked)
check "training goes on after the kill (trainer running, acknowledged past $before)" \
    wait_until 30 trains $((before + 20))
check "the trainer container is still running" is_running "$trainer"

note "producers box: down (SIGTERM: the producers say goodbye)"
compose $PP compose.producers.yml -- down -t 10 > "$CT_TMP/down-producers.log" 2>&1
check "the trainer stops by itself once the supply ended" wait_until 60 is_stopped "$trainer"
rc=$(exit_code "$trainer")
check "trainer exit code 3, supply ended (got $rc)" [ "$rc" = 3 ]
docker logs "$trainer" 2>&1 | grep -v 'round [0-9]*/' | tail -n 4
volume_cat "$STOKER_OUT_VOLUME" summary.json > "$summary" || die "no summary.json in volume $STOKER_OUT_VOLUME"
cat "$summary"
check "summary: status supply_ended" json_check "$summary" 'j["status"] == "supply_ended"'
check "summary: producer_lost event for the killed container ($vhost)" \
    json_check "$summary" "any(e['kind'] == 'producer_lost' and e['name'].startswith('$vhost-') for e in j['events'])"
check "summary: the other producers finished (goodbye), none of them lost" \
    json_check "$summary" "sum(e['kind'] == 'producer_finished' for e in j['events']) == 2 and sum(e['kind'] == 'producer_lost' for e in j['events']) == 1"
check "summary: discrepancy 0, duplicates 0" \
    json_check "$summary" 'j["audit"]["discrepancy"] == 0 and j["audit"]["duplicates_seen"] == 0'
wsize=$(docker run --rm -v "$STOKER_OUT_VOLUME:/out:ro" "$CT_BASE" stat -c %s /out/weights.safetensors)
check "weights.safetensors saved at the end of supply (${wsize:-0} bytes)" [ "${wsize:-0}" -gt 0 ]
containers_end
