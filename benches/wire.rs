//! Wire-path micro benchmarks: the RoCEv2 ICRC (RoCEv2 Annex A17.3.3) over a 64 B
//! and a 4 KiB packet, contiguous and as header + payload slices, `parse` of an
//! RDMA WRITE First packet (BTH + RETH + 1024 B payload), and the per-packet transmit
//! build of the soft provider (`tx_build`: headers written into a stack buffer and the
//! ICRC over header, payload and pad slices, as `soft::context`'s `send_batch` does
//! before `sendmmsg`) for an ACK and a 4 KiB RDMA WRITE Only.
//!
//! Run: `cargo bench --bench wire`.
use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use transport::wire::{
    build, icrc, icrc_segments, parse, verify, Aeth, Bth, IcrcIpInfo, Opcode, PacketHeaders, Reth,
    ICRC_LEN, ROCE_V2_UDP_DPORT,
};

fn ip() -> IcrcIpInfo {
    IcrcIpInfo {
        src: Ipv4Addr::new(192, 168, 77, 10).into(),
        dst: Ipv4Addr::new(192, 168, 77, 11).into(),
        ipv4_id: 1,
        udp_sport: 53208,
        udp_dport: ROCE_V2_UDP_DPORT,
    }
}

/// A SEND Only UDP payload of `len` bytes in total (BTH + payload + ICRC).
fn send_only(len: usize) -> Vec<u8> {
    let hdr = PacketHeaders::new(Bth::new(Opcode::RcSendOnly, 0x11, 0x29_fa4c, true));
    let payload = vec![0x5A; len - hdr.len() - ICRC_LEN];
    let mut out = Vec::new();
    build(&hdr, &payload, &ip(), &mut out);
    out
}

fn bench_icrc(c: &mut Criterion) {
    let ip = ip();
    let mut g = c.benchmark_group("icrc");
    for len in [64usize, 4096] {
        let pkt = send_only(len);
        let body = &pkt[..pkt.len() - ICRC_LEN];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("contiguous/{len}"), |b| {
            b.iter(|| icrc(black_box(&ip), black_box(body)))
        });
        g.bench_function(format!("segments/{len}"), |b| {
            let (hdr, payload) = body.split_at(12);
            b.iter(|| icrc_segments(black_box(&ip), black_box(&[hdr, payload])))
        });
        g.bench_function(format!("verify/{len}"), |b| {
            b.iter(|| verify(black_box(&ip), black_box(&pkt)))
        });
        // Reference: plain CRC-32 over as many bytes as the ICRC covers after the
        // precomputed 8-byte prefix (IPv4 20 + UDP 8 + UDP payload without ICRC).
        let plain = vec![0x5Au8; 28 + body.len()];
        g.bench_function(format!("crc32fast_reference/{len}"), |b| {
            b.iter(|| crc32fast::hash(black_box(&plain)))
        });
    }
    g.finish();
}

fn bench_parse(c: &mut Criterion) {
    let mut hdr = PacketHeaders::new(Bth::new(Opcode::RcRdmaWriteFirst, 0x11, 0x43_cd86, false));
    hdr.reth = Some(Reth {
        va: 0x7f5d_e0d2_1000,
        rkey: 0x286,
        dma_len: 65536,
    });
    let mut pkt = Vec::new();
    build(&hdr, &[0xA5; 1024], &ip(), &mut pkt);
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    g.bench_function("bth_reth_1024", |b| b.iter(|| parse(black_box(&pkt))));
    g.bench_function("write_bth_reth", |b| {
        let mut out = [0u8; 64];
        b.iter(|| black_box(&hdr).write(black_box(&mut out)))
    });
    g.finish();
}

fn bench_tx_build(c: &mut Criterion) {
    let ip = ip();
    let mut ack = PacketHeaders::new(Bth::new(Opcode::RcAcknowledge, 0x11, 0x29_fa4c, false));
    ack.aeth = Some(Aeth::ack(7));
    let mut write = PacketHeaders::new(Bth::new(Opcode::RcRdmaWriteOnly, 0x11, 0x43_cd86, true));
    write.reth = Some(Reth {
        va: 0x7f5d_e0d2_1000,
        rkey: 0x286,
        dma_len: 4096,
    });
    let payload = vec![0xA5u8; 4096];
    let mut g = c.benchmark_group("tx_build");
    g.throughput(Throughput::Elements(1));
    for (name, hdr, payload) in [
        ("ack", &ack, &payload[..0]),
        ("write_only_4096", &write, &payload[..]),
    ] {
        g.bench_function(name, |b| {
            let mut buf = [0u8; 64];
            let pad = [0u8; 3];
            b.iter(|| {
                let hdr = black_box(hdr);
                let n = hdr.write(&mut buf);
                let parts: [&[u8]; 3] = [&buf[..n], payload, &pad[..hdr.bth.pad_count as usize]];
                icrc_segments(&ip, &parts).to_le_bytes()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_icrc, bench_parse, bench_tx_build);
criterion_main!(benches);
