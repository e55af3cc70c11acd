#!/bin/bash
# check-capture.sh - tshark verdict on a capture of the interop matrix.
#
#   check-capture.sh NAME PCAP OUR_IP [REFERENCE_PCAP]
#
# Judges the RoCEv2 packets (UDP 4791) of PCAP, in particular the ones OUR_IP (IPv4 or
# IPv6) sent:
#  - every RoCEv2 packet decodes as InfiniBand (a BTH opcode); ours have IPv4 DF set
#    (IPv4 only), a UDP source port in 0xC000..0xFFFF (RoCEv2 Annex A17.2), P_Key
#    0xFFFF and TVer 0;
#  - CM MADs (management class 0x07) and NVMe-oF (the nvme-rdma dissector) are decoded
#    in ours;
#  - no malformed packet and no expert error, except the dissector limitation that
#    Linux's own capture shows too (REFERENCE_PCAP, e.g. testdata/captures/
#    linux-nvme-rdma-rxe.pcap): "Malformed Packet" on a non-first packet of a
#    multi-packet SEND / RDMA WRITE / READ Response, which tshark 4.0 hands to the NVMe
#    dissector without reassembling the message; and, over IPv6, tshark's "Illegal
#    checksum value (0)" on Linux rxe's packets, which all carry UDP checksum 0 (the
#    ICRC covers them; counted and required to be there, since receiving them is what
#    the IPv6 cells test); a resent packet (a PSN the same sender already sent to the
#    same QP, e.g. our go-back-N resend when an emulated peer ACKs late) is judged by
#    its first copy: tshark has no RoCE retransmission analysis and decodes the resent
#    data as a new transfer, which the NVMe dissector then reports as malformed;
#  - every ICRC recomputes ($LP_DIR/icrc_check.py, when LP_DIR is set).
# One tshark pass per capture. Prints counts and one line `cell <NAME> PASS|FAIL
# <reason>`; exits 1 on FAIL.
set -u
name=$1 pcap=$2 ours=$3 ref=${4:-}

# summarize PCAP: one tshark pass, then counts as "key=value" lines.
summarize() {
    tshark -n -r "$1" -T fields -E separator=/t -e frame.number -e ip.src -e udp.dstport \
        -e udp.srcport -e ip.flags.df -e infiniband.bth.opcode -e infiniband.bth.p_key \
        -e infiniband.bth.tver -e infiniband.mad.mgmtclass -e infiniband.mad.attributeid \
        -e frame.protocols -e _ws.malformed -e _ws.expert.severity \
        -e infiniband.cm.req.ip_cm.sport -e infiniband.cm.req.serviceid.dport \
        -e infiniband.bth.destqp -e ipv6.src -e udp.checksum.zero -e infiniband.bth.psn 2>/dev/null |
        awk -F'\t' -v ours="$ours" '
        # IBTA Vol 1 Table 38 (RC): SEND Middle/Last(+Imm), RDMA WRITE Middle/Last(+Imm),
        # READ Response Middle/Last - packets after the first of a multi-packet message.
        BEGIN { split("1 2 3 7 8 9 14 15", c, " "); for (i in c) cont[c[i]] = 1 }
        {
            frames++
            v4 = ($2 != ""); src = v4 ? $2 : $17
            # expert severity 8388608 = PI_ERROR (Malformed Packet is one; so is UDP
            # checksum 0 over IPv6, which Linux rxe sends on every RoCEv2 packet)
            nerr = gsub(/(^|,)8388608/, "", $13)
            zero6 = (!v4 && $18 != "" && $3 == 4791)
            if (zero6) { nerr--; if (src != ours) linux_zero6++ }
            bad = ($12 != "" || nerr > 0)
            nv = ($11 ~ /nvme-rdma/)
            # a PSN this sender already sent to this QP (ACKs repeat theirs: not counted)
            resent = 0
            if ($3 == 4791 && $19 != "" && $6 != 17) {
                k = src "/" $16 "/" $19 "/" $6
                if (k in seen) { resent = 1; nresent++ }
                seen[k] = 1
            }
            if (bad) { nbad++; if ((($6 in cont) && nv) || resent) known++; else { unknown++; if (ulist == "") ulist = $1 " (from " src ", opcode " $6 ")" } }
            if ($3 != 4791) next
            roce++
            if ($14 != "") reqs = reqs " " $14 ":" $15
            if ($6 != "") ib++
            if (src != ours) next
            our++
            if (zero6) our_zero6++
            if ($9 == "0x07") { cm++; attr[$10]++ }
            if (nv) nvme++
            op[$6]++
            if ($6 != "" && $6 < 100 && $16 != "0x000001") sports[$4] = 1
            if ((v4 && $5 != 1) || $4 < 49152 || $7 != 65535 || $8 != 0) { badhdr++; if (hlist == "") hlist = $1 }
        }
        END {
            printf "frames=%d\nroce=%d\nib=%d\nour=%d\ncm=%d\nnvme=%d\nbad=%d\nknown=%d\nunknown=%d\nbadhdr=%d\n", frames, roce, ib, our, cm, nvme, nbad, known, unknown, badhdr
            printf "linux_zero6=%d\nour_zero6=%d\nresent=%d\n", linux_zero6, our_zero6, nresent
            printf "ulist=%s\nhlist=%s\n", ulist, hlist
            s = ""; for (o in op) s = s " " o ":" op[o]; printf "opcodes=%s\n", s
            s = ""; for (a in attr) s = s " " a ":" attr[a]; printf "cmattrs=%s\n", s
            printf "reqs=%s\n", reqs
            s = ""; for (p in sports) s = s " " p; printf "sports=%s\n", s
        }'
}
get() { sed -n "s/^$1=//p" <<<"$2"; }

S=$(summarize "$pcap")
roce=$(get roce "$S") ib=$(get ib "$S") our=$(get our "$S") cm=$(get cm "$S") nvme=$(get nvme "$S")
echo "== $name: $pcap"
echo "frames: $(get frames "$S") total, $roce RoCEv2 (UDP 4791), $ib decoded as InfiniBand (BTH)"
echo "ours ($ours): $our RoCEv2 frames, $cm CM MADs, $nvme decoded as NVMe-oF (nvme-rdma)"
echo "our BTH opcodes (opcode:count):$(get opcodes "$S" | tr ' ' '\n' | sort -n | tr '\n' ' ')"
echo "our CM attributes (0x10 REQ, 0x13 REP, 0x14 RTU, 0x15 DREQ, 0x16 DREP):$(get cmattrs "$S")"
echo "our header checks (DF=1 on IPv4, UDP sport >= 0xC000, P_Key 0xFFFF, TVer 0): $(get badhdr "$S") bad"
case "$ours" in *:*)
    echo "IPv6 UDP checksum 0: $(get linux_zero6 "$S") RoCEv2 frames from Linux (rxe sends all with 0), $(get our_zero6 "$S") from us" ;;
esac
echo "resent RoCEv2 packets (a PSN sent before to the same QP, ACKs aside): $(get resent "$S")"
echo "malformed or expert errors: $(get bad "$S") ($(get known "$S") the known multi-packet limitation or resent, $(get unknown "$S") other)"
if [ -n "$ref" ]; then
    R=$(ours=none summarize "$ref")
    echo "Linux reference $(basename "$ref"): $(get roce "$R") RoCEv2 frames, $(get bad "$R") malformed or expert errors ($(get known "$R") the known multi-packet limitation, $(get unknown "$R") other)"
fi

# RC UDP source ports (issue 3 §1, RoCEv2 Annex A17.2): rxe derives them from the flow
# label RDMA CM puts in the REQ, fl = (IP CM source port * 31 + service port) & 0xFFFFF,
# sport = 0xC000 | ((fl & 0x3FFF) ^ (fl >> 14)); every connection of the capture gives
# one, and each RC source port we use must be one of them.
derived=" "
for r in $(get reqs "$S"); do
    fl=$(( (${r%%:*} * 31 + ${r##*:}) & 0xFFFFF ))
    derived="$derived$(( 0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) )) "
done
off=""
for p in $(get sports "$S"); do
    case "$derived" in *" $p "*) ;; *) off="$off $p" ;; esac
done
echo "our RC UDP source ports:$(get sports "$S" | tr ' ' '\n' | sort -n | tr '\n' ' ')(from the CM flow label:$( [ -z "$off" ] && echo " all" || echo " not$off"))"

fail=""
[ -z "$off" ] || fail="$fail; our RC UDP source ports$off are not derived from any CM REQ's flow label"
[ "$roce" -gt 0 ] || fail="$fail; no RoCEv2 frames"
[ "$ib" = "$roce" ] || fail="$fail; $((roce - ib)) RoCEv2 frames not decoded as InfiniBand"
[ "$our" -gt 0 ] || fail="$fail; no RoCEv2 frames from $ours"
[ "$cm" -gt 0 ] || fail="$fail; no CM MADs from $ours"
[ "$nvme" -gt 0 ] || fail="$fail; no NVMe-oF frames from $ours"
case "$ours" in *:*)
    # Over IPv6 Linux's packets carry UDP checksum 0: that we answered them is the test.
    [ "$(get linux_zero6 "$S")" -gt 0 ] || fail="$fail; no RoCEv2 frame from Linux with UDP checksum 0 over IPv6" ;;
esac
[ "$(get badhdr "$S")" = 0 ] || fail="$fail; $(get badhdr "$S") of our frames with a wrong DF/UDP source port/P_Key/TVer (first: frame $(get hlist "$S"))"
[ "$(get unknown "$S")" = 0 ] || fail="$fail; $(get unknown "$S") frames malformed or with expert errors beyond the known limitation (first: frame $(get ulist "$S"))"

if [ -n "${LP_DIR:-}" ] && command -v python3 >/dev/null; then
    icrc=$(python3 "$LP_DIR/icrc_check.py" "$pcap" | tail -1)
    echo "ICRC: $icrc"
    grep -q ", 0 bad" <<<"$icrc" || fail="$fail; ICRC: $icrc"
fi

if [ -z "$fail" ]; then
    echo "cell $name PASS $roce RoCEv2 frames all decoded ($our ours: $cm CM, $nvme NVMe-oF), $(get bad "$S") malformed, all the known multi-packet limitation or resent, ICRCs ok"
else
    echo "cell $name FAIL ${fail#; }"
    exit 1
fi
