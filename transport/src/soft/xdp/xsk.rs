//! An AF_XDP socket (XSK) with its own UMEM (Linux `Documentation/networking/af_xdp.rst`):
//! `frame_count` page-aligned frames of [`FRAME_BYTES`] registered once
//! (`XDP_UMEM_REG`), half of them lent to the kernel for receive through the fill ring,
//! half kept for transmit; the four rings mmapped at the offsets `XDP_MMAP_OFFSETS`
//! reports; bound to one (interface, queue) in copy mode with `XDP_USE_NEED_WAKEUP`
//! and `XDP_USE_SG` (a frame larger than one UMEM frame, such as a 4 KiB RoCE packet
//! at a 9000-byte MTU, spans several descriptors chained by `XDP_PKT_CONTD`).
//!
//! Receiving reads the RX ring without a system call; an empty ring costs two loads.
//! Sending writes frames into UMEM frames and the TX ring, and [`Xsk::kick`] tells the
//! kernel (`sendto`, needed in copy mode).
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;

use super::ring::Ring;

/// Bytes of one UMEM frame (one page: the largest aligned chunk size).
pub const FRAME_BYTES: u32 = 4096;
/// Largest frame [`Xsk::send`] takes and [`Xsk::recv`] reassembles, bytes (a 9000-byte
/// MTU plus the Ethernet header, rounded up to whole UMEM frames).
pub const MAX_FRAME_BYTES: usize = 3 * FRAME_BYTES as usize;

/// `struct xdp_desc`: a frame's UMEM address, length and options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// Sizes of an XSK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XskConfig {
    /// UMEM frames (a power of two); half receive, half transmit.
    pub frame_count: u32,
    /// Entries of each ring (a power of two, at least `frame_count / 2`).
    pub ring_size: u32,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frame_count: 4096,
            ring_size: 2048,
        }
    }
}

/// Counters of what the XSK saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskCounters {
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// Frames dropped on receive: a chain longer than [`MAX_FRAME_BYTES`] or a bad
    /// descriptor.
    pub rx_dropped: u64,
    /// `sendto` kicks.
    pub tx_kicks: u64,
    /// Sends refused for want of a free UMEM frame or TX ring slot.
    pub tx_full: u64,
}

impl XskCounters {
    /// Transmit wake-ups (`sendto`) per frame sent.
    pub fn kicks_per_frame(&self) -> f64 {
        self.tx_kicks as f64 / self.tx_frames.max(1) as f64
    }
}

/// Why an XSK could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    #[error(
        "AF_XDP: {what} failed: {source} (AF_XDP needs root, or CAP_NET_RAW and \
         CAP_IPC_LOCK, and a kernel built with CONFIG_XDP_SOCKETS)"
    )]
    Setup {
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "AF_XDP: binding to interface index {ifindex} queue {queue} failed: {source} (the \
         queue must exist: `ethtool -l IFACE`; veth: create it with `numrxqueues N \
         numtxqueues N`)"
    )]
    Bind {
        ifindex: u32,
        queue: u32,
        source: std::io::Error,
    },
    #[error("AF_XDP: bad sizes {0:?}: frame_count and ring_size must be powers of two, ring_size >= frame_count / 2")]
    BadConfig(XskConfig),
}

/// An mmapped area, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(
        len: usize,
        fd: RawFd,
        offset: libc::off_t,
        what: &'static str,
    ) -> Result<Mapping, XskError> {
        let (prot, flags) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_POPULATE);
        let flags = if fd < 0 {
            flags | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
        } else {
            flags | libc::MAP_SHARED
        };
        // SAFETY: a fresh mapping; the kernel checks fd and offset.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, offset) };
        if ptr == libc::MAP_FAILED {
            return Err(XskError::Setup {
                what,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in Mapping::new with this length.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One AF_XDP socket bound to one interface queue.
pub struct Xsk {
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    /// UMEM addresses free for transmit.
    tx_free: Vec<u64>,
    /// Where a multi-descriptor frame is put together on receive.
    reassembly: Vec<u8>,
    counters: XskCounters,
    // Field order: the rings' mappings go before the socket closes, the UMEM last.
    _rings: [Mapping; 4],
    fd: OwnedFd,
    umem: Mapping,
}

// SAFETY: the raw pointers are into mappings the Xsk owns; it moves between threads
// whole and is never shared.
unsafe impl Send for Xsk {}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T, what: &'static str) -> Result<(), XskError> {
    // SAFETY: `v` is a valid T of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(XskError::Setup {
            what,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

impl Xsk {
    /// Opens an XSK with its UMEM and binds it to queue `queue` of `ifindex` (in this
    /// thread's network namespace). Its receive frames are in the fill ring at once;
    /// packets reach it once it is in an XDP program's XSKMAP.
    ///
    /// # Errors
    /// [`XskError`]: not root, no AF_XDP in the kernel, bad sizes, or a queue the
    /// interface does not have.
    pub fn open(ifindex: u32, queue: u32, config: XskConfig) -> Result<Xsk, XskError> {
        let XskConfig {
            frame_count,
            ring_size,
        } = config;
        if !frame_count.is_power_of_two()
            || !ring_size.is_power_of_two()
            || ring_size < frame_count / 2
        {
            return Err(XskError::BadConfig(config));
        }
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(XskError::Setup {
                what: "socket(AF_XDP)",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: just opened.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        let umem = Mapping::new(
            frame_count as usize * FRAME_BYTES as usize,
            -1,
            0,
            "mapping the UMEM",
        )?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: umem.len as u64,
            chunk_size: FRAME_BYTES,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(
            raw,
            libc::XDP_UMEM_REG,
            &reg,
            "registering the UMEM (XDP_UMEM_REG)",
        )?;
        for (opt, what) in [
            (libc::XDP_UMEM_FILL_RING, "sizing the fill ring"),
            (libc::XDP_UMEM_COMPLETION_RING, "sizing the completion ring"),
            (libc::XDP_RX_RING, "sizing the RX ring"),
            (libc::XDP_TX_RING, "sizing the TX ring"),
        ] {
            setsockopt(raw, opt, &ring_size, what)?;
        }
        // SAFETY: zeroed plain data, filled by getsockopt.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: `off` has `len` bytes.
        if unsafe {
            libc::getsockopt(
                raw,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut len,
            )
        } < 0
        {
            return Err(XskError::Setup {
                what: "reading the ring offsets (XDP_MMAP_OFFSETS)",
                source: std::io::Error::last_os_error(),
            });
        }
        let n = ring_size as usize;
        let desc = std::mem::size_of::<XdpDesc>();
        let map = |o: &libc::xdp_ring_offset, entry: usize, pgoff: u64, what| {
            Mapping::new(o.desc as usize + n * entry, raw, pgoff as libc::off_t, what)
        };
        let fill_m = map(
            &off.fr,
            8,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            "mapping the fill ring",
        )?;
        let comp_m = map(
            &off.cr,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "mapping the completion ring",
        )?;
        let rx_m = map(
            &off.rx,
            desc,
            libc::XDP_PGOFF_RX_RING as u64,
            "mapping the RX ring",
        )?;
        let tx_m = map(
            &off.tx,
            desc,
            libc::XDP_PGOFF_TX_RING as u64,
            "mapping the TX ring",
        )?;
        // SAFETY: each mapping holds its ring's indices, flags and `ring_size`
        // entries at the kernel's offsets, and lives as long as the Xsk.
        let ring = |m: &Mapping, o: &libc::xdp_ring_offset| unsafe {
            let at = |x: u64| m.ptr.add(x as usize);
            (
                at(o.producer) as *const AtomicU32,
                at(o.consumer) as *const AtomicU32,
                at(o.flags) as *const AtomicU32,
                at(o.desc),
            )
        };
        let (p, c, f, d) = ring(&fill_m, &off.fr);
        // SAFETY: see above.
        let mut fill = unsafe { Ring::new(p, c, f, d.cast::<u64>(), ring_size) };
        let (p, c, f, d) = ring(&comp_m, &off.cr);
        // SAFETY: see above.
        let completion = unsafe { Ring::new(p, c, f, d.cast::<u64>(), ring_size) };
        let (p, c, f, d) = ring(&rx_m, &off.rx);
        // SAFETY: see above.
        let rx = unsafe { Ring::new(p, c, f, d.cast::<XdpDesc>(), ring_size) };
        let (p, c, f, d) = ring(&tx_m, &off.tx);
        // SAFETY: see above.
        let tx = unsafe { Ring::new(p, c, f, d.cast::<XdpDesc>(), ring_size) };
        // The first half of the frames receive, the second half transmit.
        let half = frame_count / 2;
        let free = fill.free(half);
        for i in 0..half.min(free) {
            fill.write(i, u64::from(i) * u64::from(FRAME_BYTES));
        }
        fill.submit(half.min(free));
        let tx_free = (half..frame_count)
            .rev()
            .map(|i| u64::from(i) * u64::from(FRAME_BYTES))
            .collect();
        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP | libc::XDP_USE_SG,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: a valid sockaddr_xdp of the size passed.
        if unsafe {
            libc::bind(
                raw,
                (&sxdp as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        } < 0
        {
            return Err(XskError::Bind {
                ifindex,
                queue,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Xsk {
            fill,
            completion,
            rx,
            tx,
            tx_free,
            reassembly: Vec::with_capacity(MAX_FRAME_BYTES),
            counters: XskCounters::default(),
            _rings: [fill_m, comp_m, rx_m, tx_m],
            fd,
            umem,
        })
    }

    /// The socket, for the XSKMAP.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// What the socket saw so far.
    pub fn counters(&self) -> XskCounters {
        self.counters
    }

    /// The kernel's counters of this socket (`XDP_STATISTICS`): frames dropped for a
    /// full RX ring or an empty fill ring, invalid descriptors.
    pub fn kernel_stats(&self) -> Option<libc::xdp_statistics> {
        // SAFETY: zeroed plain data, filled by getsockopt.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `st` has `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut st as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(st)
    }

    fn frame(&self, addr: u64, len: u32) -> &[u8] {
        let at = addr as usize;
        let end = (at + len as usize).min(self.umem.len);
        // SAFETY: within the UMEM mapping (clamped above); the kernel wrote it before
        // publishing the descriptor.
        unsafe { std::slice::from_raw_parts(self.umem.ptr.add(at.min(end)), end - at.min(end)) }
    }

    /// Whether the RX ring holds a frame (two loads, no system call).
    pub fn rx_ready(&mut self) -> bool {
        self.rx.ready() > 0
    }

    /// Hands every received frame (up to `max`) to `on_frame`, then gives their UMEM
    /// frames back to the fill ring; returns how many it handed over. Makes no system
    /// call unless the kernel asks to be woken for the fill ring.
    pub fn recv(&mut self, max: u32, mut on_frame: impl FnMut(&[u8])) -> u32 {
        let ready = self.rx.ready();
        let (mut used, mut handed) = (0, 0);
        'frames: while used < ready && handed < max {
            // A frame is one descriptor, or a chain whose all but last carry
            // XDP_PKT_CONTD; the kernel publishes a chain whole.
            let mut end = used;
            loop {
                if end == ready {
                    break 'frames;
                }
                let d = self.rx.read(end);
                end += 1;
                if d.options & libc::XDP_PKT_CONTD == 0 {
                    break;
                }
            }
            if end - used == 1 {
                let d = self.rx.read(used);
                // In place: the frame goes back to the kernel only after `on_frame`.
                on_frame(self.frame(d.addr, d.len));
                handed += 1;
            } else {
                self.reassembly.clear();
                let mut fits = true;
                for i in used..end {
                    let d = self.rx.read(i);
                    let f = self.frame(d.addr, d.len);
                    fits &= self.reassembly.len() + f.len() <= MAX_FRAME_BYTES;
                    if fits {
                        // SAFETY: `f` points into the UMEM mapping, which
                        // `reassembly` does not overlap.
                        let f = unsafe { std::slice::from_raw_parts(f.as_ptr(), f.len()) };
                        self.reassembly.extend_from_slice(f);
                    }
                }
                if fits {
                    on_frame(&self.reassembly);
                    handed += 1;
                } else {
                    self.counters.rx_dropped += 1;
                }
            }
            used = end;
        }
        self.counters.rx_frames += u64::from(handed);
        if used > 0 {
            self.recycle_rx(used);
        }
        handed
    }

    /// Returns `n` consumed RX descriptors' frames to the fill ring.
    fn recycle_rx(&mut self, n: u32) {
        let free = self.fill.free(n);
        let n_fill = n.min(free);
        for i in 0..n_fill {
            let addr = self.rx.read(i).addr & !u64::from(FRAME_BYTES - 1);
            self.fill.write(i, addr);
        }
        self.fill.submit(n_fill);
        self.rx.release(n);
        if self.fill.flags() & libc::XDP_RING_NEED_WAKEUP != 0 {
            // SAFETY: recvfrom with no buffer on our own socket: a wake-up only.
            unsafe {
                libc::recvfrom(
                    self.fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// Takes back the UMEM frames of sent frames.
    fn reap_completions(&mut self) {
        let n = self.completion.ready();
        for i in 0..n {
            self.tx_free.push(self.completion.read(i));
        }
        self.completion.release(n);
    }

    /// Queues `frame` for transmit (copied into UMEM frames, one TX descriptor per
    /// [`FRAME_BYTES`]); it leaves at the next [`Xsk::kick`]. Returns false, counting
    /// it, when no UMEM frame or TX slot is free (the caller retries later) or the
    /// frame is longer than [`MAX_FRAME_BYTES`].
    pub fn send(&mut self, frame: &[u8]) -> bool {
        let parts = frame.len().div_ceil(FRAME_BYTES as usize).max(1) as u32;
        if self.tx_free.len() < parts as usize {
            self.reap_completions();
        }
        if frame.len() > MAX_FRAME_BYTES
            || self.tx_free.len() < parts as usize
            || self.tx.free(parts) < parts
        {
            self.counters.tx_full += 1;
            return false;
        }
        for (i, chunk) in frame.chunks(FRAME_BYTES as usize).enumerate() {
            let addr = self.tx_free.pop().expect("counted above");
            // SAFETY: `addr` is a whole UMEM frame we own until its completion.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    chunk.as_ptr(),
                    self.umem.ptr.add(addr as usize),
                    chunk.len(),
                )
            };
            let last = i as u32 + 1 == parts;
            self.tx.write(
                i as u32,
                XdpDesc {
                    addr,
                    len: chunk.len() as u32,
                    options: if last { 0 } else { libc::XDP_PKT_CONTD },
                },
            );
        }
        self.tx.submit(parts);
        self.counters.tx_frames += 1;
        true
    }

    /// Tells the kernel to transmit what [`Xsk::send`] queued (a `sendto`, when the
    /// TX ring asks for a wake-up, as it always does in copy mode); no system call
    /// when the kernel has taken every queued descriptor already.
    pub fn kick(&mut self) {
        if self.tx.unconsumed() > 0 && self.tx.flags() & libc::XDP_RING_NEED_WAKEUP != 0 {
            self.counters.tx_kicks += 1;
            // SAFETY: sendto with no data on our own socket: a wake-up only.
            unsafe {
                libc::sendto(
                    self.fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
        }
        self.reap_completions();
    }
}
