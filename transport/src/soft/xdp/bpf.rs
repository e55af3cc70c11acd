//! Loading and attaching the XDP program through the `bpf(2)` system call: an XSKMAP
//! (`BPF_MAP_TYPE_XSKMAP`, one slot per receive queue), the program of [`super::prog`]
//! (`BPF_PROG_LOAD`, multi-buffer aware so the interface may keep a 9000-byte MTU), and
//! a BPF link (`BPF_LINK_CREATE`, attach type `BPF_XDP`) that detaches the program when
//! its file descriptor closes: when [`XdpProgram`] drops or the process dies, the
//! interface is left as it was.
//!
//! Needs CAP_BPF and CAP_NET_ADMIN (root). Attribute layouts: `union bpf_attr` in
//! `include/uapi/linux/bpf.h`.
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::prog::{redirect_roce_program, BpfInsn};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// Attach type `BPF_XDP`.
const BPF_XDP: u32 = 37;
/// `BPF_F_XDP_HAS_FRAGS`: the program understands multi-buffer frames (veth then
/// allows an MTU above one page).
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
/// `XDP_FLAGS_SKB_MODE` (generic XDP) and `XDP_FLAGS_DRV_MODE` (native).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// The license string the kernel records (the program uses no GPL-only helper).
const LICENSE: &CStr = c"MIT OR Apache-2.0";
/// Verifier log size kept when a load fails, bytes.
const VERIFIER_LOG_BYTES: usize = 64 * 1024;

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// Why the XDP program could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "AF_XDP: {what} failed: {source} (it needs root, or CAP_BPF and CAP_NET_ADMIN, and a \
         kernel with eBPF XDP: run as root, or use the UDP packet path)"
    )]
    Syscall {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("AF_XDP: the kernel's verifier refused the XDP program: {source}\n{log}")]
    Verifier { source: std::io::Error, log: String },
    #[error(
        "AF_XDP: cannot attach XDP to interface index {ifindex}: {source} (another XDP \
         program may be attached: `ip link set dev IFACE xdp off`; with an MTU above the \
         driver's XDP limit, lower it: `ip link set dev IFACE mtu 3000`)"
    )]
    Attach {
        ifindex: u32,
        source: std::io::Error,
    },
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<RawFd> {
    // SAFETY: `attr` is a valid, initialized `union bpf_attr` prefix of its own size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as RawFd)
    }
}

fn name16(name: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    let n = name.len().min(15);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    b
}

/// The XDP program attached to one interface, with its XSKMAP. Dropping it detaches
/// the program (the link's file descriptor closes).
pub struct XdpProgram {
    xskmap: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// The interface it is attached to.
    pub ifindex: u32,
    /// Native (driver) XDP, else generic (SKB) XDP.
    pub native: bool,
}

impl XdpProgram {
    /// Loads the program with an XSKMAP of `queues` slots (one per poll group; a
    /// packet goes to slot `dest_qp % queues` when it arrived on that queue) and
    /// attaches it to `ifindex`, natively where the driver can (veth can), else in
    /// generic mode.
    ///
    /// # Errors
    /// [`BpfError`]: not root, the verifier's refusal (with its log), or an interface
    /// that already has an XDP program or whose MTU is too large for XDP.
    pub fn attach(ifindex: u32, queues: u32) -> Result<XdpProgram, BpfError> {
        let mut map = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queues.max(1),
            map_name: name16("roce_xsks"),
            ..Default::default()
        };
        let xskmap = sys_bpf(BPF_MAP_CREATE, &mut map).map_err(|source| BpfError::Syscall {
            what: "creating the XSKMAP (bpf BPF_MAP_CREATE)",
            source,
        })?;
        // SAFETY: the kernel just returned this descriptor to us.
        let xskmap = unsafe { OwnedFd::from_raw_fd(xskmap) };
        let insns: Vec<BpfInsn> = redirect_roce_program(xskmap.as_raw_fd(), queues.max(1));
        let prog = load(&insns)?;
        let mut last = None;
        for (flags, native) in [(XDP_FLAGS_DRV_MODE, true), (XDP_FLAGS_SKB_MODE, false)] {
            let mut link = LinkCreateAttr {
                prog_fd: prog.as_raw_fd() as u32,
                target_ifindex: ifindex,
                attach_type: BPF_XDP,
                flags,
            };
            match sys_bpf(BPF_LINK_CREATE, &mut link) {
                Ok(fd) => {
                    return Ok(XdpProgram {
                        xskmap,
                        _prog: prog,
                        // SAFETY: the kernel just returned this descriptor to us.
                        _link: unsafe { OwnedFd::from_raw_fd(fd) },
                        ifindex,
                        native,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(BpfError::Attach {
            ifindex,
            source: last.unwrap_or_else(|| std::io::Error::other("no XDP mode tried")),
        })
    }

    /// Puts the AF_XDP socket `xsk` in `queue`'s slot: packets for us that arrive on
    /// that receive queue go to it.
    ///
    /// # Errors
    /// [`BpfError::Syscall`]: a queue beyond the map's slots, or a socket not bound.
    pub fn insert(&self, queue: u32, xsk: RawFd) -> Result<(), BpfError> {
        let (key, value) = (queue, xsk as u32);
        let mut attr = MapElemAttr {
            map_fd: self.xskmap.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..Default::default()
        };
        sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr)
            .map(drop)
            .map_err(|source| BpfError::Syscall {
                what: "putting the AF_XDP socket into the XSKMAP (bpf BPF_MAP_UPDATE_ELEM)",
                source,
            })
    }

    /// Empties `queue`'s slot (its packets pass to the stack again).
    pub fn remove(&self, queue: u32) {
        let key = queue;
        let mut attr = MapElemAttr {
            map_fd: self.xskmap.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            ..Default::default()
        };
        let _ = sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr);
    }
}

fn load(insns: &[BpfInsn]) -> Result<OwnedFd, BpfError> {
    let attr = |log: &mut Vec<u8>| ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level: u32::from(!log.is_empty()),
        log_size: log.len() as u32,
        log_buf: if log.is_empty() {
            0
        } else {
            log.as_mut_ptr() as u64
        },
        prog_flags: BPF_F_XDP_HAS_FRAGS,
        prog_name: name16("roce_to_xsk"),
        expected_attach_type: BPF_XDP,
        ..Default::default()
    };
    let mut none = Vec::new();
    match sys_bpf(BPF_PROG_LOAD, &mut attr(&mut none)) {
        // SAFETY: the kernel just returned this descriptor to us.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Err(BpfError::Syscall {
            what: "loading the XDP program (bpf BPF_PROG_LOAD)",
            source: e,
        }),
        Err(_) => {
            // Load again with the verifier's log to say why.
            let mut log = vec![0u8; VERIFIER_LOG_BYTES];
            let source = match sys_bpf(BPF_PROG_LOAD, &mut attr(&mut log)) {
                // SAFETY: the kernel just returned this descriptor to us.
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
                Err(e) => e,
            };
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(BpfError::Verifier {
                source,
                log: String::from_utf8_lossy(&log[..end]).into_owned(),
            })
        }
    }
}
