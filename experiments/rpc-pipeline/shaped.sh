#!/usr/bin/env bash
# measure.sh's planned-placement run with each rpc-server in its own network namespace, behind a veth link
# shaped to RATE in both directions by a token bucket (tc tbf): the client talks to the servers as over a LAN.
# Needs root, iproute2 and the kernel's tbf qdisc (netem, which would add delay, is not in this machine's kernel).
#
#   sudo experiments/rpc-pipeline/shaped.sh [MODEL [LENGTHS [RUNS [RATE]]]]    # RATE default 1gbit
set -euo pipefail
source "$(dirname "$0")/common.sh"
rate="${4:-1gbit}"
shape_link() {  # $1 = device, [$2 = namespace]
    local run=(); [ -n "${2:-}" ] && run=(ip netns exec "$2")
    "${run[@]}" tc qdisc add dev "$1" root tbf rate "$rate" burst 256kb latency 50ms
}
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    for i in 1 2; do ip netns del "rf$i" 2>/dev/null || true; ip link del "rfh$i" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
endpoints=()
for i in 1 2; do
    ip netns add "rf$i"
    ip link add "rfh$i" type veth peer name "rfn$i"
    ip link set "rfn$i" netns "rf$i"
    ip addr add "10.77.$i.1/24" dev "rfh$i" && ip link set "rfh$i" up
    ip netns exec "rf$i" ip addr add "10.77.$i.2/24" dev "rfn$i"
    ip netns exec "rf$i" ip link set "rfn$i" up
    ip netns exec "rf$i" ip link set lo up
    shape_link "rfh$i" && shape_link "rfn$i" "rf$i"
    ip netns exec "rf$i" "$repo/.venv/bin/ggml-rpc-server" -H "10.77.$i.2" -p 50400 -t 1 > /dev/null 2>&1 &
    endpoints+=("10.77.$i.2:50400")
done
sleep 2
"${ttft[@]}" --rpc "$(IFS=,; echo "${endpoints[*]}")" -ts auto --json-out "$out/shaped-auto.json"
tc -s qdisc show dev rfh1 | head -3
"$py" "$here/summary.py" "$out"
