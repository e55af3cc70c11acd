//! Writes and reads back blocks with no copy: the data lives in a registered buffer
//! of the host's pool (`IoBuf`) that the target reads and writes itself; a plain-slice
//! read shows the copying convenience beside it.
//!
//!     cargo run -p nvmf-initiator --example read_write -- 127.0.0.2:4420 \
//!         nqn.2026-11.io.nvmf-rdma:target 127.0.0.3
//!
//! Arguments as `connect`'s. It writes the first 64 KiB of namespace 1.
use nvmf_initiator::{Host, HostOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: read_write TRADDR:TRSVCID SUBNQN [LOCAL_IP]";
    let traddr = args.next().ok_or(usage)?.parse()?;
    let subnqn = args.next().ok_or(usage)?;
    let mut opts = HostOptions::new(traddr, subnqn);
    if let Some(ip) = args.next() {
        opts.local_ip = Some(ip.parse()?);
    }
    let host = Host::connect(opts).await?;
    let ns = host.namespace(1).await?;
    let len = 64 << 10;
    // A registered buffer (waits while the pool is full), filled in place.
    let mut buf = host.alloc(len).await?;
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    // The buffer goes to the command and comes back with its result: no copy.
    let buf = ns.write_buf(0, buf, false).await?;
    let mut buf = buf;
    buf.fill(0);
    let buf = ns.read_buf(0, buf).await?;
    assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    println!(
        "wrote and read back {len} bytes at {:#x}, zero-copy",
        buf.addr()
    );
    // As bytes::Bytes, still without a copy (the block returns to the pool when the
    // last clone is dropped).
    let bytes = buf.into_bytes();
    println!("first bytes {:?}", &bytes[..8]);
    // The plain-slice convenience copies through a pool buffer.
    let mut copy = vec![0u8; 4096];
    ns.read(0, &mut copy).await?;
    assert_eq!(&copy[..], &bytes[..4096]);
    println!("{} bytes copied by the slice API", host.bytes_copied());
    drop(bytes);
    host.disconnect().await?;
    Ok(())
}
