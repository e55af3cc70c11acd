# guest-gids.sh - guest scenario (linux-peer): record rxe0's sysfs GID table as test data
# for transport/src/sysfs/gid.rs. Adds a VLAN netdev (eth0.100, 192.168.100.x) and, with
# -a ipv6=1, an IPv6 ULA (fd77::<last octet>) so the table holds link-local, IPv4-mapped,
# IPv6 and VLAN entries, then copies every gids/N, gid_attrs/types/N and
# gid_attrs/ndevs/N file it can read into $LP_OUT/sysfs/ (the same tree below
# /sys/class/infiniband). Empty slots: the GID file reads as all zeroes and the type
# and ndev files fail to read (EINVAL): those are listed in $LP_OUT/sysfs/unreadable.txt.
. /host/scenarios/lib.sh
last=${LP_ADDR##*.}
if ip link add link eth0 name eth0.100 type vlan id 100 2>/dev/null; then
    ip addr add "192.168.100.$last/24" dev eth0.100
    ip link set eth0.100 up
    echo "vlan eth0.100 192.168.100.$last"
else
    echo "!! no VLAN support in the guest (8021q); no VLAN GID recorded"
fi
if [ "${LP_IPV6:-0}" = 1 ]; then
    ip -6 addr add "fd77::$last/64" dev eth0 nodad
    echo "ipv6 fd77::$last"
fi
sleep 2
dst="$LP_OUT/sysfs"
rm -rf "$dst"; mkdir -p "$dst"
: >"$dst/unreadable.txt"
for dev in /sys/class/infiniband/*; do
    d=$(basename "$dev")
    for port in "$dev"/ports/*; do
        p=$(basename "$port")
        base="$d/ports/$p"
        mkdir -p "$dst/$base/gids" "$dst/$base/gid_attrs/types" "$dst/$base/gid_attrs/ndevs"
        for g in "$port"/gids/*; do
            i=$(basename "$g")
            for rel in "gids/$i" "gid_attrs/types/$i" "gid_attrs/ndevs/$i"; do
                if v=$(cat "$port/$rel" 2>/dev/null); then
                    echo "$v" >"$dst/$base/$rel"
                else
                    echo "$base/$rel" >>"$dst/unreadable.txt"
                fi
            done
        done
        echo "--- $base (non-zero GIDs)"
        for g in "$port"/gids/*; do
            i=$(basename "$g"); v=$(cat "$g")
            [ "$v" = "0000:0000:0000:0000:0000:0000:0000:0000" ] && continue
            echo "gid[$i] $v type=$(cat "$port/gid_attrs/types/$i" 2>/dev/null) ndev=$(cat "$port/gid_attrs/ndevs/$i" 2>/dev/null)"
        done
    done
done
echo "unreadable files: $(wc -l <"$dst/unreadable.txt")"
ip -br addr
