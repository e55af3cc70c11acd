#!/bin/bash
# our-reload.sh - run.sh host hook (-H) of the interop group `reload` (issue 16 item 2):
# our nvmf-target with a --config file on the bridge address, reconfigured live with
# SIGHUP while the Linux host in VM B (guest/reload-host.sh) runs fio on namespace 1.
#
# Env from run.sh: LP_SHARE (results dir = the 9p share), LP_HOST_IP (192.168.77.1).
# Env from run-matrix.sh: NVMF_TARGET_BIN, INTEROP_IMG (namespace 1, created sparse at
# INTEROP_NS_SIZE), INTEROP_NS_SIZE, INTEROP_NQN.
#
# Steps, each asked for by the guest with a file under $LP_SHARE/out/B/ and answered
# with one under $LP_SHARE/out/A/ once the target logged the reload's outcome:
#   want-add    -> namespace 2 (a 16 MiB file) added to the file, SIGHUP  -> added
#   want-bad    -> the file made unparsable, SIGHUP (refused, nothing
#                  changes), then the file of the add step put back         -> bad-done
#   want-remove -> namespace 2 taken out of the file, SIGHUP                -> removed
#   want-port-remove -> the second listen entry (4421, serving the subsystem
#                  $INTEROP_NQN-port2 only) taken out of the file, SIGHUP    -> port-removed
# Its own cells (`cell NAME PASS|FAIL reason`) go to $LP_SHARE/cells-hook.txt:
# sighup-add, sighup-bad-refused, sighup-remove, sighup-port-remove (the target's log
# line for each).
# Stops the target (SIGTERM) when $LP_SHARE/out/stop appears; its exit status goes to
# $LP_SHARE/target.rc, its log is $LP_SHARE/target.log.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ip=${LP_HOST_IP:-192.168.77.1}
log="$LP_SHARE/target.log"
cfg="$LP_SHARE/reload.toml"
cells="$LP_SHARE/cells-hook.txt"
ns2="$LP_SHARE/reload-ns2.img"
: >"$cells"
rm -f "$ns2"
cell() { echo "cell $*" | tee -a "$cells"; }
# The second port (4421) serves a second subsystem until want-port-remove.
nqn2="$INTEROP_NQN-port2"
port2=1

write_config() {   # write_config WITH_NS2(0|1); the second port while $port2 is 1
    cat >"$cfg" <<TOML
[[listen]]
addr = "$ip"
trsvcid = 4420
portid = 1
subsystems = ["$INTEROP_NQN"]
TOML
    if [ "$port2" = 1 ]; then
        cat >>"$cfg" <<TOML

[[listen]]
addr = "$ip"
trsvcid = 4421
portid = 2
subsystems = ["$nqn2"]
TOML
    fi
    cat >>"$cfg" <<TOML

[[subsystems]]
nqn = "$nqn2"

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "16M"

[[subsystems]]
nqn = "$INTEROP_NQN"

[[subsystems.namespaces]]
nsid = 1
path = "$INTEROP_IMG"
size = "$INTEROP_NS_SIZE"
TOML
    if [ "$1" = 1 ]; then
        cat >>"$cfg" <<TOML

[[subsystems.namespaces]]
nsid = 2
path = "$ns2"
size = "16M"
TOML
    fi
}

write_config 0
echo "$(date +%T) starting $NVMF_TARGET_BIN --config $cfg"
NO_COLOR=1 RUST_LOG="${INTEROP_TARGET_LOG:-info}" "$NVMF_TARGET_BIN" --config "$cfg" \
    >"$log" 2>&1 &
pid=$!
stop_target() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { echo "target ignored SIGTERM for 5 s, SIGKILL"; kill -KILL "$pid"; }
    fi
    wait "$pid" 2>/dev/null
    echo $? >"$LP_SHARE/target.rc"
    echo "$(date +%T) target exited with status $(cat "$LP_SHARE/target.rc")"
}
trap 'stop_target; exit 0' TERM INT

wait_serving nvmf-target
mkdir -p "$LP_SHARE/out/A"
touch "$LP_SHARE/out/A/ready"
echo "$(date +%T) target ready"

# reload NAME PATTERN: SIGHUP, then wait (10 s) for a new log line matching PATTERN.
reload() {
    local name=$1 pattern=$2 before line
    before=$(grep -c "configuration reload" "$log")
    kill -HUP "$pid"
    for _ in $(seq 1 100); do
        [ "$(grep -c "configuration reload" "$log")" -gt "$before" ] && break
        sleep 0.1
    done
    line=$(grep "configuration reload" "$log" | tail -n +$((before + 1)) | tail -1)
    if echo "$line" | grep -qE "$pattern"; then
        cell "$name" PASS "target: $(echo "$line" | sed 's/.*configuration reload/configuration reload/' | cut -c1-200)"
    else
        cell "$name" FAIL "no log line matching '$pattern' after SIGHUP; last: ${line:-none}"
    fi
}

while [ ! -e "$LP_SHARE/out/stop" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "$(date +%T) nvmf-target died during the run"
        stop_target
        exit 1
    fi
    if [ -e "$LP_SHARE/out/B/want-add" ] && [ ! -e "$LP_SHARE/out/A/added" ]; then
        write_config 1
        reload sighup-add "reloaded: namespaces added: $INTEROP_NQN nsid 2"
        touch "$LP_SHARE/out/A/added"
    fi
    if [ -e "$LP_SHARE/out/B/want-bad" ] && [ ! -e "$LP_SHARE/out/A/bad-done" ]; then
        echo 'subsystems = "not a table' >>"$cfg"
        reload sighup-bad-refused "WARN.*configuration reload: .*(parse error|not applied)"
        write_config 1
        touch "$LP_SHARE/out/A/bad-done"
    fi
    if [ -e "$LP_SHARE/out/B/want-remove" ] && [ ! -e "$LP_SHARE/out/A/removed" ]; then
        write_config 0
        reload sighup-remove "reloaded: namespaces removed: $INTEROP_NQN nsid 2"
        touch "$LP_SHARE/out/A/removed"
    fi
    if [ -e "$LP_SHARE/out/B/want-port-remove" ] && [ ! -e "$LP_SHARE/out/A/port-removed" ]; then
        port2=0
        write_config 0
        reload sighup-port-remove "reloaded: .*listen removed: $ip:4421.*1 controller\(s\) disconnected"
        touch "$LP_SHARE/out/A/port-removed"
    fi
    sleep 0.2
done
echo "$(date +%T) out/stop seen"
stop_target
