# nvmet-ana-target.sh - guest scenario of the interop group `nvmet-ana` (issue 15 item
# 4): Linux nvmet-rdma with ANA, for our host's native multipath. It rides on the `ana`
# group's boot as VM N. Namespace 1 (a 64 MiB null_blk, nvmet_setup) of
# nqn.2026-11.io.example:ref is in ANA group 1, reached through port 1 (4420, the
# group optimized) and port 2 (4421, non-optimized) at this VM's address. When the
# host asks (/host/out/nvmet-ana/flip), port 1's group goes inaccessible and port 2's
# optimized (nvmet sends each controller an ANA Change AEN), then $LP_OUT/flipped.
# Stops when /host/out/nvmet-ana/done and /host/out/stop exist (or after
# $LP_TARGET_TIMEOUT s, default 300).
. /host/scenarios/lib.sh
NQN=nqn.2026-11.io.example:ref
nv=/sys/kernel/config/nvmet   # (lib.sh's nvmet_setup sets $cfg)
nvmet_setup rdma "$LP_ADDR" 4420 "$NQN" || { echo "!! nvmet setup failed"; dmesg | tail -20; }
mkdir $nv/ports/2
echo rdma > $nv/ports/2/addr_trtype
echo ipv4 > $nv/ports/2/addr_adrfam
echo "$LP_ADDR" > $nv/ports/2/addr_traddr
echo 4421 > $nv/ports/2/addr_trsvcid
echo non-optimized > $nv/ports/2/ana_groups/1/ana_state
ln -s $nv/subsystems/$NQN $nv/ports/2/subsystems/$NQN
state() { echo "port1=$(cat $nv/ports/1/ana_groups/1/ana_state) port2=$(cat $nv/ports/2/ana_groups/1/ana_state)"; }
echo "nvmet ANA: $(state); namespace 1 ana_grpid=$(cat $nv/subsystems/$NQN/namespaces/1/ana_grpid)"
echo "namespace 1 device_uuid=$(cat $nv/subsystems/$NQN/namespaces/1/device_uuid) device_nguid=$(cat $nv/subsystems/$NQN/namespaces/1/device_nguid)"
touch "$LP_OUT/ready"
end=$(( $(date +%s) + ${LP_TARGET_TIMEOUT:-300} ))
flipped=0
while [ "$(date +%s)" -lt $end ]; do
    if [ $flipped = 0 ] && [ -e /host/out/nvmet-ana/flip ]; then
        echo inaccessible > $nv/ports/1/ana_groups/1/ana_state
        echo optimized > $nv/ports/2/ana_groups/1/ana_state
        echo "flipped: $(state)"
        touch "$LP_OUT/flipped"
        flipped=1
    fi
    [ -e /host/out/nvmet-ana/done ] && [ -e /host/out/stop ] && break
    sleep 0.2
done
echo "--- dmesg (nvmet) ---"; dmesg | grep -iE 'nvmet|rdma|rxe' | tail -40
