#!/usr/bin/env bash
# The main job across test hosts (tests/hosts: network namespaces joined by
# links shaped with tc's tbf), with the multi-host launcher: one `launch`
# per host, host 0 serving the rendezvous. Prints one line per run: hosts,
# layout, link rate, wall time, final test accuracy, and the bytes each
# host's eth0 sent and received (`ip -s link`). Needs root.
#
#   bench/multi_host.sh RATE_MBIT LAYOUT [LAUNCH FLAGS...]
#     LAYOUT one:       1 host, both workers and shards (the baseline)
#            colocated: 2 hosts, each a worker and a server shard
#            own:       4 hosts, shards on hosts 0-1, workers on hosts 2-3
#            ddp:       2 hosts, the same MLP under PyTorch's DDP (gloo, one
#                       process per host: bench/ddp_mlp_job.py, whose flags
#                       --epochs, --batch_size, --learning_rate,
#                       --lr_schedule, --seed, --model are launch's names;
#                       others are refused)
#   bench/multi_host.sh 1000 colocated --epochs=2
#   bench/multi_host.sh 1000 ddp --epochs=2
#
# Wall time is from the first process started (launch, or the DDP job's
# Python) to the last one's exit, startup included in both.
#
# Build first: bazel build -c opt //deploy/local:launch //server //worker
#              //tests/hosts:hosts
set -euo pipefail
cd "$(dirname "$0")/.."
if (( $# < 2 )); then
  echo "usage: bench/multi_host.sh RATE_MBIT one|colocated|own|ddp [FLAGS...]" >&2
  exit 2
fi
rate=$1
layout=$2
shift 2
if [[ ! $rate =~ ^[0-9]+$ ]]; then
  echo "RATE_MBIT must be a whole number of Mbit/s (0: unshaped), got '$rate'" >&2
  exit 2
fi
case "$layout" in
  one) num_hosts=1; server_hosts=0 ;;
  colocated) num_hosts=2; server_hosts=0 ;;
  own) num_hosts=4; server_hosts=2 ;;
  ddp) num_hosts=2; server_hosts=0 ;;
  *) echo "LAYOUT must be one, colocated, own or ddp, got '$layout'" >&2; exit 2 ;;
esac
python=${PYTHON:-/usr/bin/python3}
bin=bazel-bin
work=$(mktemp -d /tmp/multi-host-bench.XXXXXX)
"$bin/tests/hosts/hosts" --num_hosts="$num_hosts" --rate_mbit="$rate" \
  > "$work/hosts.txt" &
hosts_pid=$!
trap 'kill $hosts_pid 2>/dev/null; wait $hosts_pid 2>/dev/null; rm -rf "$work"' EXIT
until grep -qs '^ready' "$work/hosts.txt"; do sleep 0.2; done
mapfile -t namespaces < <(awk '$1 == "host" { print $4 }' "$work/hosts.txt")
address0=$(awk '$1 == "host" && $2 == 0 { print $3 }' "$work/hosts.txt")

bytes() {  # NAMESPACE -> "RX TX" bytes of eth0
  ip -n "$1" -s link show eth0 | awk '/RX:/ { getline; rx = $1 } /TX:/ { getline; tx = $1 } END { print rx, tx }'
}
declare -a before
for i in "${!namespaces[@]}"; do before[$i]=$(bytes "${namespaces[$i]}"); done
load=$(cut -d' ' -f1 /proc/loadavg)
start=$(date +%s.%N)
pids=()
for ((i = num_hosts - 1; i >= 0; i--)); do
  if [[ $layout == ddp ]]; then
    # torchrun's variables; gloo on the link, one math thread as our
    # launcher gives each of several workers on a host.
    ip netns exec "${namespaces[$i]}" env RANK="$i" WORLD_SIZE="$num_hosts" \
      MASTER_ADDR="$address0" MASTER_PORT=29500 GLOO_SOCKET_IFNAME=eth0 \
      OMP_NUM_THREADS=1 "$python" bench/ddp_mlp_job.py "$@" \
      > "$work/launch$i.log" 2>&1 &
  else
    ip netns exec "${namespaces[$i]}" "$bin/deploy/local/launch" \
      --num_hosts="$num_hosts" --host_index="$i" \
      --rendezvous="$address0:29400" --server_hosts="$server_hosts" \
      --lr_schedule=cosine --device=cpu --output=progress \
      --run_dir="$work/run$i" "$@" > "$work/launch$i.log" 2>&1 &
  fi
  pids[$i]=$!
done
status=0
for i in "${!pids[@]}"; do wait "${pids[$i]}" || status=$?; done
end=$(date +%s.%N)
if [[ $layout == ddp ]]; then
  outcome=$(sed -n 's/^RESULT //p' "$work/launch0.log" | "$python" -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("final test accuracy %.4f (DDP, %d steps, training %.1fs)"
          % (r["test_accuracy"], r["steps"], r["train_s"]))')
else
  outcome=$(awk '$1 == "outcome" { $1 = ""; print substr($0, 2) }' "$work/run0/run.txt")
fi
printf '%s hosts=%d rate=%sMbit wall=%.1fs exit=%d load=%s outcome="%s"\n' \
  "$layout" "$num_hosts" "$rate" "$(echo "$end - $start" | bc)" "$status" \
  "$load" "$outcome"
for i in "${!namespaces[@]}"; do
  read -r rx0 tx0 <<< "${before[$i]}"
  read -r rx1 tx1 <<< "$(bytes "${namespaces[$i]}")"
  printf '  host %d: sent %d MB, received %d MB\n' "$i" \
    $(( (tx1 - tx0) / 1000000 )) $(( (rx1 - rx0) / 1000000 ))
done
[[ $status == 0 ]] || tail -5 "$work"/launch*.log
