#!/usr/bin/env bash
# The main job: the reference experiment stoker grew from (docs/design.md), run locally.
# A broker, N synthetic producers (default 16) and the trainer over ipc://, then the inline
# baseline with the same settings (batch 4, round length 20, 100 rounds, one-minute time goal),
# and a side-by-side table. Installs what is missing and builds first.
#   scripts/run.sh [--producers N] [--quick] [--device auto|cpu|gpu]
#   --quick divides the per-example delays (0.05:0.5 s) and the time goal by 10.
set -euo pipefail
cd "$(dirname "$0")/.."
producers=16
quick=0
device=auto
while [ $# -gt 0 ]; do
    case "$1" in
    --producers) producers=${2:?--producers needs a number}; shift 2 ;;
    --quick) quick=1; shift ;;
    --device) device=${2:?--device needs auto, cpu or gpu}; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$producers" in ''|*[!0-9]*|0) echo "run.sh: --producers needs a positive integer" >&2; exit 2 ;; esac
case "$device" in auto|cpu|gpu) ;; *) echo "run.sh: --device needs auto, cpu or gpu, not '$device'" >&2; exit 2 ;; esac

bash scripts/build.sh
bin=${STOKER_BUILD:-build}
delay=0.05:0.5
time_goal=60
if [ "$quick" = 1 ]; then delay=0.005:0.05; time_goal=6; fi

work=$(mktemp -d /tmp/stoker-run.XXXXXX)
pids=()
cleanup() {
    # Every process this script started is gone when it ends, whatever the reason. Only the
    # script itself cleans up: a job signalled between its fork and its exec is still a copy of
    # this shell with these traps, and must not remove $work under the others.
    local self _
    read -r self _ </proc/self/stat # this process's own pid, read by the shell itself
    if [ "$self" != "$$" ]; then return 0; fi
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'read -r self _ </proc/self/stat; if [ "$self" != "$$" ]; then exit 143; fi; echo "run.sh: interrupted" >&2; exit 130' INT TERM

url="ipc://$work/broker.ipc"
echo "== parallel: broker + $producers producers (delay $delay s per example) + trainer on $url" >&2
"$bin/server/stoker-broker" --listen "$url" --queue-depth 12 --log-level warn >"$work/broker.out" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$work/broker.out" 2>/dev/null && break; sleep 0.1; done
# The trainer starts first and waits for the first producer, so its clock does not include
# examples the producers queued before it was there.
"$bin/trainer/stoker-trainer" --broker "$url" --batch-size 4 --round-length 20 --rounds 100 \
    --time-goal "$time_goal" --device "$device" --progress off --log-level warn \
    --stall-timeout 10 --json "$work/parallel.json" 2>"$work/parallel.log" &
trainer=$!
pids+=($trainer)
sleep 1 # the trainer probes the GPU before it connects; producers start once it waits for them
producer_pids=()
for i in $(seq "$producers"); do
    "$bin/producer/stoker-producer" --broker "$url" --name "producer-$i" --delay "$delay" \
        --chunk 3 --seed "$i" --log-level error &
    producer_pids+=($!)
done
pids+=("${producer_pids[@]}")
set +e
wait "$trainer"
parallel_rc=$?
set -e
for p in "${producer_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait "${producer_pids[@]}" 2>/dev/null || true
tail -n 3 "$work/parallel.log" >&2 || true
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
# A trainer that could not run (--device gpu without a usable GPU, say) has no figures to put
# in a table: stop with its reason and its exit code.
if [ "$parallel_rc" -ne 0 ]; then
    echo "run.sh: the trainer failed (exit $parallel_rc), no table:" >&2
    grep -m 3 -E 'ERROR|error' "$work/parallel.log" >&2 || tail -n 3 "$work/parallel.log" >&2
    exit "$parallel_rc"
fi

echo "== inline baseline: the same generator called inside the training loop" >&2
set +e
"$bin/trainer/stoker-trainer" --inline --delay "$delay" --batch-size 4 --round-length 20 \
    --rounds 100 --time-goal "$time_goal" --device "$device" --progress off --log-level warn \
    --json "$work/inline.json" 2>"$work/inline.log"
inline_rc=$?
set -e
tail -n 3 "$work/inline.log" >&2 || true
if [ "$inline_rc" -ne 0 ]; then
    echo "run.sh: the inline baseline failed (exit $inline_rc), no table:" >&2
    grep -m 3 -E 'ERROR|error' "$work/inline.log" >&2 || tail -n 3 "$work/inline.log" >&2
    exit "$inline_rc"
fi

python3 - "$work/parallel.json" "$work/inline.json" "$producers" "$delay" <<'PY'
import json, sys
par = json.load(open(sys.argv[1]))
inl = json.load(open(sys.argv[2]))
producers = int(sys.argv[3])
lo, hi = map(float, sys.argv[4].split(":"))
ideal = producers / ((lo + hi) / 2)
rows = [("inline (baseline)", inl), (f"stoker, {producers} producers", par)]
print()
print(f"{'':24} {'batches':>8} {'examples':>9} {'seconds':>8} {'ex/s':>8} {'speedup':>8} "
      f"{'dups':>5} {'discrep':>8} {'wait':>6}  status")
for name, r in rows:
    a = r.get("audit") or {}
    speed = r["examples_per_second"] / inl["examples_per_second"] if inl["examples_per_second"] else 0
    print(f"{name:24} {r['batches']:>8} {r['examples']:>9} {r['seconds']:>8.1f} "
          f"{r['examples_per_second']:>8.1f} {speed:>7.1f}x {a.get('duplicates_seen', 0):>5} "
          f"{a.get('discrepancy', 0):>8} {100 * r['data_wait_fraction']:>5.1f}%  {r['status']}")
print()
print(f"ideal rate for {producers} producers: {ideal:.1f} examples/s; stoker reached "
      f"{100 * par['examples_per_second'] / ideal:.1f}% of it")
print("prototype (seed experiment): inline 3.4 ex/s, parallel kernels 46 ex/s with ~1% duplicates")
PY
[ "$parallel_rc" -eq 0 ] && [ "$inline_rc" -eq 0 ]
