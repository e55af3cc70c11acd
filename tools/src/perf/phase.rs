//! The data phase of each test, as perftest's `run_iter_*` functions run it, over the
//! resources [`super::run`] set up: the bandwidth client and SEND receiver, the three
//! latency ping-pongs, and the passive side of the one-sided tests.
use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use transport::verbs::provider::{Context, MemoryRegion, Provider};
use transport::verbs::{
    QpType, SendFlags, SendOp, SendWr, SgList, Sge, WcOpcode, WcStatus, WorkCompletion,
};

use super::kind::Verb;
use super::oob::BwReport;
use super::run::{now_ns, post_recv, verbs, Options, PerfError, Res, STALL};
use super::session::Session;
use super::stats;

pub(super) fn send_wr<P: Provider>(
    res: &Res<P>,
    q: usize,
    verb: Verb,
    size: u64,
    id: u64,
    sig: bool,
) -> SendWr {
    let rem = res.rem[q];
    let op = match verb {
        Verb::Send if res.conn == QpType::Ud => SendOp::UdSend {
            dest: res.ud[q],
            imm_data: None,
        },
        Verb::Send => SendOp::Send,
        Verb::Write => SendOp::RdmaWrite {
            remote_addr: rem.vaddr,
            rkey: rem.rkey,
        },
        Verb::Read => SendOp::RdmaRead {
            remote_addr: rem.vaddr,
            rkey: rem.rkey,
        },
    };
    SendWr {
        wr_id: id,
        op,
        sg_list: SgList::one(Sge {
            addr: res.local(q),
            length: size as u32,
            lkey: res.mr.lkey(),
        }),
        flags: if sig {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        },
    }
}

/// A passive side: keeps the provider going until the peer's next message, busy
/// polling while packets come and sleeping on the receive socket (at most 1 ms at a
/// time) once none came for 200 us, as the target's poll groups do.
pub(super) fn passive<P: Provider>(s: &mut Session, res: &mut Res<P>) -> Result<(), PerfError> {
    // The passive side's QPs complete nothing (no receives, no sends): progress alone
    // (one receive batch per round), no CQ to poll.
    let mut idle_since = Instant::now();
    s.wait_for_peer(|| {
        if res.ctx.progress() > 0 {
            idle_since = Instant::now();
            return Ok(true);
        }
        if idle_since.elapsed() > Duration::from_micros(200) {
            res.ctx.wait(Duration::from_millis(1));
        }
        Ok(true)
    })?;
    Ok(())
}

/// `run_iter_bw`: up to `tx_depth` WRs outstanding per QP, every `cq_mod`-th of a QP
/// (and its last) signalled; each completion completes the QP's WRs up to it.
pub(super) fn bw_client<P: Provider>(
    res: &mut Res<P>,
    o: &Options,
    size: u64,
) -> Result<BwReport, PerfError> {
    let qps = res.qps.len();
    let verb = o.kind.verb();
    let per_qp = o.iters;
    let timed = o.duration.map(Duration::from_secs);
    let n = if timed.is_some() {
        u64::MAX
    } else {
        per_qp * qps as u64
    };
    let cq_mod = u64::from(o.cq_mod.max(1)).min(per_qp.max(1));
    let tx = u64::from(o.tx_depth.max(1));
    let mut posted = Vec::new();
    let mut completed = Vec::new();
    let mut outstanding: Vec<VecDeque<u64>> = vec![VecDeque::new(); qps];
    let mut sent = vec![0u64; qps];
    let mut wcs = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 32];
    let t0 = Instant::now();
    let mut scnt = 0u64;
    let mut ccnt = 0u64;
    let mut last_progress = Instant::now();
    let mut stop = false;
    while ccnt < scnt || (!stop && scnt < n) {
        if let Some(d) = timed {
            if t0.elapsed() >= d {
                stop = true;
            }
        }
        for q in 0..qps {
            while !stop
                && scnt < n
                && (outstanding[q].len() as u64) < tx
                && (timed.is_some() || sent[q] < per_qp)
            {
                sent[q] += 1;
                let sig = timed.is_some() || sent[q].is_multiple_of(cq_mod) || sent[q] == per_qp;
                let wr = send_wr(
                    res,
                    q,
                    verb,
                    size,
                    scnt,
                    sig || (outstanding[q].len() as u64 + 1) >= tx,
                );
                if timed.is_none() {
                    posted.push(now_ns(t0));
                    completed.push(0);
                }
                res.ctx
                    .post_send(res.qps[q], &wr)
                    .map_err(verbs("ibv_post_send"))?;
                outstanding[q].push_back(scnt);
                scnt += 1;
            }
        }
        let c = res.poll(&mut wcs)?;
        if c > 0 {
            last_progress = Instant::now();
            let t = now_ns(t0);
            for wc in &wcs[..c] {
                let q = res
                    .qps
                    .iter()
                    .position(|x| x.qpn() == wc.qp_num)
                    .unwrap_or(0);
                while let Some(id) = outstanding[q].pop_front() {
                    if timed.is_none() {
                        completed[id as usize] = t;
                    }
                    ccnt += 1;
                    if id == wc.wr_id {
                        break;
                    }
                }
            }
        } else if last_progress.elapsed() > STALL {
            return Err(PerfError::Stalled(STALL));
        } else {
            std::thread::yield_now();
        }
    }
    Ok(match timed {
        Some(_) => stats::bw_report_duration(size, ccnt, now_ns(t0), o.gbits),
        // perftest skips the peak beyond 20,000 iterations (its search is quadratic).
        None => stats::bw_report(
            size,
            &posted,
            &completed,
            cq_mod as usize,
            o.gbits,
            o.iters <= 20_000,
        ),
    })
}

/// `run_iter_bw_server`: counts the receives (reposting them) until every QP had
/// `iters`, or, timed, until the client's next message.
pub(super) fn send_bw_server<P: Provider>(
    res: &mut Res<P>,
    s: &mut Session,
    o: &Options,
    size: u64,
    rx: u32,
) -> Result<BwReport, PerfError> {
    let qps = res.qps.len();
    let want = o.iters * qps as u64;
    let depth = u64::from(rx.min(o.iters as u32).max(1));
    let mut posted_per_qp = vec![depth; qps];
    let mut wcs = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 32];
    let t0 = Instant::now();
    let mut first: Option<u64> = None;
    let mut stamps = Vec::new();
    let recv_len = res.slot as u32;
    let mut step = |res: &mut Res<P>, stamps: &mut Vec<u64>| -> Result<bool, PerfError> {
        let c = res.poll(&mut wcs)?;
        let t = now_ns(t0);
        for wc in &wcs[..c] {
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            first.get_or_insert(t);
            stamps.push(t);
            let q = wc.wr_id as usize;
            if o.duration.is_some() || posted_per_qp[q] < o.iters {
                posted_per_qp[q] += 1;
                post_recv(res, q, recv_len)?;
            }
        }
        Ok(c > 0)
    };
    // Timed, or unreliable (UC, UD: a lost message never arrives, so the receiver
    // counts what came until the client's next message).
    if o.duration.is_some() || res.conn != QpType::Rc {
        let mut err = None;
        s.wait_for_peer(|| match step(res, &mut stamps) {
            Ok(b) => Ok(b),
            Err(e) => {
                err = Some(e);
                Err(io::Error::other("completion error"))
            }
        })
        .or_else(|e| err.take().map_or(Err(PerfError::Oob(e)), Err))?;
        if o.duration.is_none() {
            // Unreliable: the client's message can overtake its last packets; take
            // what still comes until a quiet 50 ms (or every message is in).
            let mut quiet = Instant::now();
            while (stamps.len() as u64) < want && quiet.elapsed() < Duration::from_millis(50) {
                if step(res, &mut stamps)? {
                    quiet = Instant::now();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        let t = stamps.last().copied().unwrap_or(0) - first.unwrap_or(0);
        return Ok(stats::bw_report_duration(
            size,
            stamps.len() as u64,
            t,
            o.gbits,
        ));
    }
    let mut last_progress = Instant::now();
    while (stamps.len() as u64) < want {
        if step(res, &mut stamps)? {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > STALL {
            return Err(PerfError::Stalled(STALL));
        } else {
            std::thread::yield_now();
        }
    }
    // perftest's receiver reports no peak (noPeak for the SEND BW server): from the
    // first receive to the last.
    let t = stamps.last().copied().unwrap_or(0) - first.unwrap_or(0);
    Ok(stats::bw_report_duration(
        size,
        stamps.len() as u64,
        t,
        o.gbits,
    ))
}

/// Completions seen by [`poll_until`].
#[derive(Default)]
pub(super) struct Counts {
    pub(super) recv: u64,
    pub(super) send: u64,
}

/// Polls until `done` holds, counting receive and send completions into `c`; fails
/// after [`STALL`] without a completion.
pub(super) fn poll_until<P: Provider>(
    res: &mut Res<P>,
    c: &mut Counts,
    mut done: impl FnMut(&Counts, &Res<P>) -> bool,
) -> Result<(), PerfError> {
    let mut wcs = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
    let mut last = Instant::now();
    while !done(c, res) {
        let n = res.poll(&mut wcs)?;
        for wc in &wcs[..n] {
            if wc.opcode == WcOpcode::Recv {
                c.recv += 1;
            } else {
                c.send += 1;
            }
        }
        if n > 0 {
            last = Instant::now();
        } else if last.elapsed() > STALL {
            return Err(PerfError::Stalled(STALL));
        } else {
            // Let the peer run where both spin on fewer cores than they need.
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// The byte at `off` of the region, read volatile (the peer's RDMA WRITE lands there,
/// a race the protocol orders).
pub(super) fn peek_byte<P: Provider>(res: &Res<P>, off: usize) -> u8 {
    assert!(off < res.mr.len());
    // SAFETY: in range (checked above) of memory the region owns.
    unsafe { std::ptr::read_volatile(res.mr.as_ptr().add(off)) }
}

/// `run_iter_lat_write`: the server writes first; each side waits until the last byte
/// of its buffer holds the count of the writes received, then writes its own count.
pub(super) fn write_lat<P: Provider>(
    res: &mut Res<P>,
    o: &Options,
    size: u64,
    client: bool,
) -> Result<Vec<u64>, PerfError> {
    let iters = o.iters;
    let poll_off = res.remote_slot_off(0) + size as usize - 1;
    let post_off = size as usize - 1;
    let mut posted = Vec::with_capacity(iters as usize);
    let t0 = Instant::now();
    let mut c = Counts::default();
    for scnt in 0..iters {
        if client || scnt > 0 {
            // The server skips its first wait, so its count of writes seen lags by one.
            let want = if client { scnt + 1 } else { scnt } as u8;
            poll_until(res, &mut c, |_, r| peek_byte(r, poll_off) == want)?;
        }
        posted.push(now_ns(t0));
        res.mr.write(post_off, &[(scnt + 1) as u8]);
        let wr = send_wr(res, 0, Verb::Write, size, scnt, true);
        res.ctx
            .post_send(res.qps[0], &wr)
            .map_err(verbs("ibv_post_send"))?;
    }
    poll_until(res, &mut c, |c, _| c.send >= iters)?;
    if !client {
        // The client's last write answers ours: wait for it before the handshake.
        let want = iters as u8;
        poll_until(res, &mut c, |_, r| peek_byte(r, poll_off) == want)?;
    }
    Ok(posted)
}

/// `run_iter_lat_send`: the client sends first; each side answers a receive with a
/// send, reposting the receive.
pub(super) fn send_lat<P: Provider>(
    res: &mut Res<P>,
    o: &Options,
    size: u64,
    client: bool,
    recv_len: u32,
) -> Result<Vec<u64>, PerfError> {
    let iters = o.iters;
    let mut posted = Vec::with_capacity(iters as usize);
    let t0 = Instant::now();
    let mut c = Counts::default();
    let mut reposted = u64::from(o.rx_depth.min(iters as u32).max(1));
    for scnt in 0..iters {
        if !client {
            poll_until(res, &mut c, |c, _| c.recv > scnt)?;
        }
        posted.push(now_ns(t0));
        let wr = send_wr(res, 0, Verb::Send, size, scnt, true);
        res.ctx
            .post_send(res.qps[0], &wr)
            .map_err(verbs("ibv_post_send"))?;
        if client {
            poll_until(res, &mut c, |c, _| c.recv > scnt)?;
        }
        if reposted < iters {
            post_recv(res, 0, recv_len)?;
            reposted += 1;
        }
    }
    poll_until(res, &mut c, |c, _| c.send >= iters)?;
    Ok(posted)
}

/// `run_iter_lat` (READ): one RDMA READ at a time, stamped at each post.
pub(super) fn read_lat<P: Provider>(
    res: &mut Res<P>,
    o: &Options,
    size: u64,
) -> Result<Vec<u64>, PerfError> {
    let mut posted = Vec::with_capacity(o.iters as usize);
    let t0 = Instant::now();
    let mut c = Counts::default();
    for scnt in 0..o.iters {
        posted.push(now_ns(t0));
        let wr = send_wr(res, 0, Verb::Read, size, scnt, true);
        res.ctx
            .post_send(res.qps[0], &wr)
            .map_err(verbs("ibv_post_send"))?;
        poll_until(res, &mut c, |c, _| c.send > scnt)?;
    }
    Ok(posted)
}
