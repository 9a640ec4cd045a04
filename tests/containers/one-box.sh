#!/usr/bin/env bash
# containers suite: everything on one box, docker/compose.yml as users run it, with the CPU
# trainer (its `trainer-cpu` service, --profile cpu): broker + 4 producers + trainer to its time
# goal through `up --exit-code-from`; the broker turns healthy, /metrics and /status answer on
# the published port, every process runs as uid 10001, the summary in the volume has
# discrepancy 0 and no duplicates; then `docker stop` of a training trainer saves and exits 130.
. "$(dirname "$0")/lib.sh"
containers_begin one-box
stoker_images

P=stokerone$$
# Host ports 0: the engine picks free ones (never fixed ports in tests).
export STOKER_OUT_VOLUME=stoker-test-out-$P STOKER_BROKER_PORT=0 STOKER_METRICS_PORT=0 \
    STOKER_PRODUCERS=4 STOKER_DELAY=0.05:0.5 STOKER_TIME_GOAL=20
on_exit "compose $P compose.yml -- --profile cpu down -v --remove-orphans -t 10"
summary=$CT_TMP/summary.json

note "--profile cpu up --exit-code-from trainer-cpu trainer-cpu (time goal ${STOKER_TIME_GOAL} s)"
compose $P compose.yml -- --profile cpu up --exit-code-from trainer-cpu trainer-cpu > "$CT_TMP/up.log" 2>&1 &
up_pid=$!

wait_until 60 has_container $P broker || die "no broker container after 60 s: $(tail -n 20 "$CT_TMP/up.log")"
broker=$(container_of $P broker)
check "broker's health check turns healthy" wait_until 60 is_healthy "$broker"
mport=$(host_port "$broker" 9090)
note "broker metrics published on host port $mport"
check "trainer-cpu started (after the broker was healthy)" wait_until 60 has_container $P trainer-cpu
curl -fsS "http://127.0.0.1:$mport/metrics" > "$CT_TMP/metrics" 2>&1
check "/metrics through the published port has stoker_produced_total" grep -q '^stoker_produced_total' "$CT_TMP/metrics"
all_alive() {
    curl -fsS "http://127.0.0.1:$mport/status" > "$CT_TMP/status.json" &&
        json_check "$CT_TMP/status.json" 'j["producers_alive"] == 4 and j["trainers_connected"] == 1'
}
check "/status through the published port: 4 producers alive, 1 trainer" wait_until 30 all_alive
for svc in broker producer trainer-cpu; do
    n=1
    [ "$svc" = producer ] && n=4
    for i in $(seq 1 $n); do
        c=$(container_of $P $svc "$i")
        uids=$(uids_in "$c")
        check "$svc #$i runs as uid 10001 only (ps on the host: $uids)" [ "$uids" = 10001 ]
    done
done

t0=$SECONDS
while kill -0 "$up_pid" 2>/dev/null && [ $((SECONDS - t0)) -lt 180 ]; do sleep 1; done
if kill -0 "$up_pid" 2>/dev/null; then
    kill "$up_pid"
    die "up --exit-code-from did not return within 180 s"
fi
wait "$up_pid"
rc=$?
tail -n 5 "$CT_TMP/up.log"
check "up --exit-code-from trainer-cpu returns the trainer's exit code 0 (got $rc)" [ "$rc" -eq 0 ]
trainer=$(container_of $P trainer-cpu)
# docker-compose 1.29 stops only the named service on --exit-code-from; `down` ends the rest
# (and keeps the volume).
compose $P compose.yml -- --profile cpu down -t 10 > "$CT_TMP/down.log" 2>&1
check "down stops the broker and the producers (running: $(running_in $P | tr '\n' ' '))" none_running_in $P
volume_cat "$STOKER_OUT_VOLUME" summary.json > "$summary" || die "no summary.json in volume $STOKER_OUT_VOLUME"
cat "$summary"
check "summary: status time_goal on the cpu" json_check "$summary" 'j["status"] == "time_goal" and j["device"] == "cpu"'
check "summary: trained batches (> 0)" json_check "$summary" 'j["batches"] > 0'
check "summary: discrepancy 0, duplicates 0" \
    json_check "$summary" 'j["audit"]["discrepancy"] == 0 and j["audit"]["duplicates_seen"] == 0'
wsize=$(docker run --rm -v "$STOKER_OUT_VOLUME:/out:ro" "$CT_BASE" stat -c %s /out/weights.safetensors)
check "weights.safetensors in the volume (${wsize:-0} bytes)" [ "${wsize:-0}" -gt 0 ]

# docker stop of a trainer in the middle of training: it saves what it trained, exits 130.
docker run --rm -v "$STOKER_OUT_VOLUME:/out" "$CT_BASE" rm -f /out/summary.json /out/weights.safetensors
export STOKER_TIME_GOAL=600
note "up -d trainer-cpu (time goal 600 s), then docker stop of the trainer"
acked() {
    curl -fsS "http://127.0.0.1:$(host_port "$(container_of $P broker)" 9090)/status" > "$CT_TMP/status.json" &&
        python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["counters"]["acknowledged"])' "$CT_TMP/status.json"
}
compose $P compose.yml -- --profile cpu up -d trainer-cpu > "$CT_TMP/up2.log" 2>&1 || die "up -d trainer-cpu: $(tail -n 20 "$CT_TMP/up2.log")"
trainer=$(container_of $P trainer-cpu)
# The broker was restarted by `up`: its counters count only this trainer's acknowledgements.
training() { [ "$(acked)" -gt 100 ]; }
check "the second trainer trains (broker: acknowledged > 100)" wait_until 90 training
sleep 2
docker stop -t 30 "$trainer" > /dev/null
rc=$(exit_code "$trainer")
check "docker stop of the trainer: exit code 130 (got $rc)" [ "$rc" = 130 ]
volume_cat "$STOKER_OUT_VOLUME" summary.json > "$summary" || fail "no summary.json after docker stop"
check "summary after docker stop: status interrupted" json_check "$summary" 'j["status"] == "interrupted" and j["batches"] > 0'
wsize=$(docker run --rm -v "$STOKER_OUT_VOLUME:/out:ro" "$CT_BASE" stat -c %s /out/weights.safetensors)
check "weights.safetensors saved on docker stop (${wsize:-0} bytes)" [ "${wsize:-0}" -gt 0 ]
containers_end
