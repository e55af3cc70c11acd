# ipv6.sh - sourced by the run.sh hooks of the interop matrix for the IPv6 groups
# (run-matrix.sh sets INTEROP_IPV6=1 for them).
#
# run.sh turns IPv6 off in its namespace; the guests (-a ipv6=1) use fd77::<last IPv4
# octet>/64 (linux-peer lib.sh: ipv6_setup). `bridge_ipv6` gives the run's bridge
# ($LP_BRIDGE) IPv6 and fd77::1/64 (no DAD), the host side's address, and prints it.
# ip6_of IPV4: the guest's IPv6 address for its IPv4 address (192.168.77.10 -> fd77::10).
INTEROP_HOST_IP6=fd77::1
bridge_ipv6() {
    sysctl -qw "net.ipv6.conf.${LP_BRIDGE:?}.disable_ipv6=0" || return 1
    ip -6 addr add "$INTEROP_HOST_IP6/64" dev "$LP_BRIDGE" nodad || return 1
    echo "$(date +%T) $LP_BRIDGE: $(ip -6 -o addr show dev "$LP_BRIDGE" scope global | awk '{print $4}')"
}
ip6_of() { echo "fd77::${1##*.}"; }
