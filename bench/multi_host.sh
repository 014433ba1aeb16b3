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
#   bench/multi_host.sh 1000 colocated --epochs=2
#
# Build first: bazel build -c opt //deploy/local:launch //server //worker
#              //tests/hosts:hosts
set -euo pipefail
cd "$(dirname "$0")/.."
rate=$1
layout=$2
shift 2
case "$layout" in
  one) num_hosts=1; server_hosts=0 ;;
  colocated) num_hosts=2; server_hosts=0 ;;
  own) num_hosts=4; server_hosts=2 ;;
  *) echo "layout: colocated or own" >&2; exit 2 ;;
esac
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
  ip netns exec "${namespaces[$i]}" "$bin/deploy/local/launch" \
    --num_hosts="$num_hosts" --host_index="$i" \
    --rendezvous="$address0:29400" --server_hosts="$server_hosts" \
    --lr_schedule=cosine --device=cpu --output=progress \
    --run_dir="$work/run$i" "$@" > "$work/launch$i.log" 2>&1 &
  pids[$i]=$!
done
status=0
for i in "${!pids[@]}"; do wait "${pids[$i]}" || status=$?; done
end=$(date +%s.%N)
outcome=$(awk '$1 == "outcome" { $1 = ""; print substr($0, 2) }' "$work/run0/run.txt")
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
