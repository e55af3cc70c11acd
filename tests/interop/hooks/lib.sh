# lib.sh - sourced by the host hooks that start a target of ours in the background.

# Waits up to 10 s for the word "serving" in the hook's $log while the target's process
# $pid lives. When it never comes: says that target `$1` did not come up, prints the
# log, calls the hook's stop_target and exits 1.
wait_serving() {
    for _ in $(seq 1 100); do
        grep -q "serving" "$log" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    grep -q "serving" "$log" 2>/dev/null && return 0
    echo "$(date +%T) $1 did not come up:"; cat "$log"
    stop_target
    exit 1
}
