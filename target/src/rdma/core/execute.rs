//! Execution of a request's command once its data is in place (nvmet's `execute`
//! after `parse`): Connect (with the queue's own checks), Property Get/Set and admin
//! commands run here against the registry and the queue's controller; I/O commands
//! become io_uring operations ([`IoOp`]) when the ring has a slot for each, a Dataset
//! Management all of its ranges at once. Also the lookups they share: the request's
//! data buffer, its namespace, write-through.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use dhchap::Progress;
use nvme::status::{GenericStatus, Status};

use super::{Data, ReqState, RequestCore};
use crate::admin::{self, AdminOutcome};
use crate::backend::memory::MemoryStore;
use crate::capsule::Kind;
use crate::fabrics::{self, ConnectOutcome};
use crate::io::{self, IoCommand};
use crate::oplog;
use crate::rdma::action::{Action, Buf, IoOp, RegionId};
use crate::subsystem::NamespaceRef;
use crate::uring::{FALLOC_DEALLOCATE, FALLOC_WRITE_ZEROES};

/// The status of an Authentication Send/Receive on a queue that owes no
/// authentication (its host has no `host_keys` entry): Command Sequence Error, DNR.
fn no_authentication() -> Status {
    Status::generic(GenericStatus::CommandSequenceError).with_dnr()
}

/// How `execute` left a request.
pub(super) enum Exec {
    /// Its state moved on (Executed, Executing or AwaitingEvent).
    Moved,
    /// Not enough io_uring slots now: it waits in the ready queue.
    Wait,
}

impl RequestCore {
    /// The request's data buffer (host data, or room for controller data).
    pub(super) fn data_buf(&self, i: usize) -> Option<Buf> {
        let r = &self.reqs[i];
        let (region, offset) = match r.data {
            Data::None => return None,
            Data::Chunk(c) => (RegionId::Data, c.offset),
            Data::InCapsule(at) => (RegionId::InCapsule, at),
        };
        Some(Buf {
            region,
            offset,
            len: r.data_len,
        })
    }

    /// Whether the data slab can ever hold both buffers of a Compare of `len` bytes
    /// (the host's data and the blocks read): a slab of one MDTS cannot for more than
    /// half of it, and such a Compare is refused rather than left waiting forever.
    pub(super) fn media_fits(&self, len: u32) -> bool {
        let block = (len as usize)
            .max(super::MIN_DATA_BUFFER)
            .next_power_of_two();
        self.pool.capacity() / block >= 2
    }

    /// A Compare's status once its blocks were read: its data against them
    /// ([`io::compare_status`]).
    pub(super) fn compare_media(&self, i: usize) -> Status {
        let r = &self.reqs[i];
        let (Some(host), Some(media)) = (self.data_buf(i), r.media) else {
            return Status::generic(GenericStatus::InternalError);
        };
        let media = Buf {
            region: RegionId::Data,
            offset: media.offset,
            len: r.data_len,
        };
        io::compare_status(self.bytes(host), self.bytes(media))
    }

    /// Counts a successful I/O command `cmd` of the namespace at fixed-file index
    /// `file` in its counters ([`crate::stats`]): reads and Compares, writes.
    pub(super) fn count_io(&self, file: u32, cmd: IoCommand) {
        let Some(Some(stats)) = self.ns_stats.get(file as usize) else {
            return;
        };
        match cmd {
            IoCommand::Read { len, .. } | IoCommand::Compare { len, .. } => {
                stats.count_read(self.cfg.group, u64::from(len))
            }
            IoCommand::Write { len, .. } => stats.count_write(self.cfg.group, u64::from(len)),
            _ => {}
        }
    }

    /// The namespace request `i` names on its queue's controller, and the subsystem NQN.
    pub(super) fn namespace_of(&self, i: usize) -> Option<(NamespaceRef, &str)> {
        let r = &self.reqs[i];
        let ctrl = self.queues.get(&r.qpn)?.ctrl.as_deref()?;
        Some((
            ctrl.subsys.namespace(r.sqe.nsid())?,
            ctrl.subsys.nqn.as_str(),
        ))
    }

    /// Whether a write of request `i` must be durable before it completes (FUA, or the
    /// controller's volatile write cache is off); true when in doubt.
    fn write_through(&self, i: usize, fua: bool) -> bool {
        let r = &self.reqs[i];
        self.queues
            .get(&r.qpn)
            .and_then(|q| q.ctrl.as_deref())
            .is_none_or(|c| c.write_through(fua))
    }

    /// ReadyToExecute: Connect, Property Get/Set and admin commands run here; I/O
    /// commands become io_uring operations when the ring has room for all of them.
    pub(super) fn execute(&mut self, i: usize, now: Instant) -> Exec {
        let r = self.reqs[i];
        let qpn = r.qpn;
        if let Kind::Io(cmd) = r.kind {
            return self.execute_io(i, cmd);
        }
        let Some(q) = self.queues.get(&qpn) else {
            self.set_state(i, ReqState::Completed);
            return Exec::Moved;
        };
        let (qid, port, peer, ctrl) = (q.qid, q.port, q.peer(qpn), q.ctrl.clone());
        match r.kind {
            Kind::Connect => {
                // The admin path may copy; the I/O path never does (the counter's doc).
                let data = self.data_buf(i).map(|b| self.bytes(b).to_vec());
                let data = data.unwrap_or_default();
                self.counters
                    .data_bytes_copied
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                let outcome = match fabrics::connect_precondition(qid, ctrl.is_some(), &r.sqe) {
                    Some(refused) => refused,
                    None => {
                        let outcome = fabrics::connect(&self.reg, port, &r.sqe, &data, now);
                        let span = self.queues.get(&qpn).map(|q| q.span.clone());
                        let _span = span.map(tracing::Span::entered);
                        oplog::fabrics_connect(&peer, &r.sqe, &data, &outcome);
                        outcome
                    }
                };
                let (status, dw0) = match outcome {
                    ConnectOutcome::Accepted { ctrl, dw0 } => {
                        if let Some(q) = self.queues.get_mut(&qpn) {
                            q.attach(qpn, ctrl);
                        }
                        (Status::SUCCESS, dw0)
                    }
                    ConnectOutcome::Refused { status, dw0 } => {
                        self.reg
                            .refusals
                            .count(crate::metrics::Refusal::of_connect(status, dw0));
                        (status, dw0)
                    }
                };
                self.reqs[i].dw0 = dw0;
                self.finish(i, status);
            }
            Kind::PropertyGet => match fabrics::property_get(ctrl.as_deref(), &r.sqe) {
                Ok(v) => {
                    self.reqs[i].dw0 = v as u32;
                    self.reqs[i].dw1 = (v >> 32) as u32;
                    self.finish(i, Status::SUCCESS);
                }
                Err(st) => self.finish(i, st),
            },
            Kind::Disconnect => {
                if let Err(st) = fabrics::disconnect_check(ctrl.as_deref(), &r.sqe) {
                    self.finish(i, st);
                    return Exec::Moved;
                }
                let Some(q) = self.queues.get_mut(&qpn) else {
                    self.set_state(i, ReqState::Completed);
                    return Exec::Moved;
                };
                q.closing = true;
                if q.outstanding() <= 1 {
                    // Nothing else of the queue is unanswered: its CQE is the last now.
                    if let Some(ctrl) = q.ctrl.take() {
                        ctrl.release_queue(q.qid);
                    }
                    self.finish(i, Status::SUCCESS);
                } else {
                    q.disconnect = Some(i as u32);
                    self.set_state(i, ReqState::AwaitingEvent);
                }
            }
            Kind::PropertySet => {
                let st = fabrics::property_set_at(ctrl.as_deref(), &r.sqe, now)
                    .err()
                    .unwrap_or(Status::SUCCESS);
                self.finish(i, st);
            }
            Kind::AuthSend => {
                let data = self.data_buf(i).map(|b| self.bytes(b).to_vec());
                let auth = self.queues.get_mut(&qpn).and_then(|q| q.auth.as_mut());
                let Some(auth) = auth else {
                    self.finish(i, no_authentication());
                    return Exec::Moved;
                };
                let progress = auth.on_send(&data.unwrap_or_default());
                self.reqs[i].ends_queue = matches!(progress, Progress::Failed(_));
                self.log_auth(qpn, &peer, &progress);
                self.finish(i, Status::SUCCESS);
            }
            Kind::AuthReceive => {
                let al = self.reqs[i].c2h_len as usize;
                let buf = self.data_buf(i);
                let auth = self.queues.get_mut(&qpn).and_then(|q| q.auth.as_mut());
                let (Some(auth), Some(buf)) = (auth, buf) else {
                    self.finish(i, no_authentication());
                    return Exec::Moved;
                };
                let (msg, progress) = auth.on_receive(al);
                self.bytes_mut(buf)[..msg.len()].copy_from_slice(&msg);
                let r = &mut self.reqs[i];
                r.c2h_len = msg.len() as u32;
                r.ends_queue = matches!(progress, Progress::Failed(_));
                self.log_auth(qpn, &peer, &progress);
                self.finish(i, Status::SUCCESS);
            }
            Kind::Admin => {
                let Some(ctrl) = ctrl else {
                    self.finish(i, Status::generic(GenericStatus::CommandSequenceError));
                    return Exec::Moved;
                };
                let buf = self.data_buf(i);
                let reg = self.reg.clone();
                let out = match buf {
                    Some(b) => self.bytes_mut(b),
                    None => &mut [],
                };
                match admin::handle(&reg, &ctrl, &r.sqe, out, now) {
                    AdminOutcome::Done {
                        status,
                        dw0,
                        data_len,
                    } => {
                        let r = &mut self.reqs[i];
                        r.dw0 = dw0;
                        if r.c2h_len > 0 {
                            r.c2h_len = data_len.min(r.c2h_len as usize) as u32;
                        }
                        self.finish(i, status);
                    }
                    AdminOutcome::Hold => self.set_state(i, ReqState::AwaitingEvent),
                }
                self.events_due = Some(qpn);
            }
            Kind::Io(_) => {}
        }
        Exec::Moved
    }

    /// Logs the end of a queue's authentication transaction (success at info, failure
    /// at warn with its cause), in the queue's span.
    fn log_auth(&self, qpn: u32, peer: &oplog::QueuePeer, progress: &Progress) {
        let span = self.queues.get(&qpn).map(|q| q.span.clone());
        let _span = span.map(tracing::Span::entered);
        oplog::authentication(peer, progress);
    }

    fn execute_io(&mut self, i: usize, cmd: IoCommand) -> Exec {
        let Some((ns, _)) = self.namespace_of(i) else {
            self.finish(
                i,
                Status::generic(GenericStatus::InvalidNamespaceOrFormat).with_dnr(),
            );
            return Exec::Moved;
        };
        let file = ns.file_index;
        let (nlb, block_size) = (ns.ns.nlb(), u64::from(ns.ns.block_size()));
        let req = i as u32;
        self.reqs[i].file = file;
        if let Some(Some(b)) = self.in_memory.get(file as usize) {
            let b: *const crate::backend::Backend = Arc::as_ptr(b);
            // SAFETY: the Arc stays in `self.in_memory` through this call: an entry
            // changes only in `add_namespace`/`remove_namespace`, which the poll group
            // calls between commands, never from `execute_in_memory`; the pointer only
            // lets the store be used while the request's buffers are borrowed mutably.
            let store = unsafe { (*b).memory() };
            if let Some(store) = store {
                self.execute_in_memory(i, cmd, store, nlb);
                return Exec::Moved;
            }
        }
        let op = match cmd {
            IoCommand::Read { offset, .. } => {
                let Some(buf) = self.data_buf(i) else {
                    self.finish(i, Status::SUCCESS);
                    return Exec::Moved;
                };
                IoOp::Read { file, buf, offset }
            }
            IoCommand::Write { offset, fua, .. } => {
                let Some(buf) = self.data_buf(i) else {
                    self.finish(i, Status::SUCCESS);
                    return Exec::Moved;
                };
                let dsync = self.write_through(i, fua);
                IoOp::Write {
                    file,
                    buf,
                    offset,
                    dsync,
                }
            }
            IoCommand::Compare { offset, len } => {
                let Some(media) = self.reqs[i].media else {
                    self.finish(i, Status::generic(GenericStatus::InternalError));
                    return Exec::Moved;
                };
                let buf = Buf {
                    region: RegionId::Data,
                    offset: media.offset,
                    len,
                };
                IoOp::Read { file, buf, offset }
            }
            IoCommand::Flush => IoOp::Fsync { file },
            IoCommand::WriteZeroes { offset, len, .. } => IoOp::Fallocate {
                file,
                mode: FALLOC_WRITE_ZEROES,
                offset,
                len,
            },
            IoCommand::DatasetManagement { ranges, deallocate } => {
                return self.execute_deallocate(i, file, ranges, deallocate, nlb, block_size)
            }
        };
        if self.io_slots_free == 0 {
            return Exec::Wait;
        }
        match cmd {
            IoCommand::Read { .. } => {
                self.counters
                    .rdma_write_reads
                    .fetch_add(1, Ordering::Relaxed);
            }
            IoCommand::WriteZeroes { fua, .. } => {
                self.reqs[i].sync_after = self.write_through(i, fua);
            }
            _ => {}
        }
        self.submit(i, req, std::iter::once(op), 1);
        Exec::Moved
    }

    /// Runs I/O command `cmd` of request `i` on a null or RAM namespace (`store`, of
    /// `nlb` blocks): a copy between its data buffer and the memory, in this poll
    /// group, completing at once.
    fn execute_in_memory(&mut self, i: usize, cmd: IoCommand, store: &MemoryStore, nlb: u64) {
        let status = match cmd {
            IoCommand::Read { offset, .. } => {
                if let Some(buf) = self.data_buf(i) {
                    store.read(offset, self.bytes_mut(buf));
                }
                Status::SUCCESS
            }
            IoCommand::Write { offset, .. } => {
                if let Some(buf) = self.data_buf(i) {
                    store.write(offset, self.bytes(buf));
                }
                Status::SUCCESS
            }
            IoCommand::Compare { offset, len } => match self.reqs[i].media {
                Some(m) => {
                    let media = Buf {
                        region: RegionId::Data,
                        offset: m.offset,
                        len,
                    };
                    store.read(offset, self.bytes_mut(media));
                    self.compare_media(i)
                }
                None => Status::generic(GenericStatus::InternalError),
            },
            IoCommand::Flush => Status::SUCCESS,
            IoCommand::WriteZeroes { offset, len, .. } => {
                store.zero(offset, len);
                Status::SUCCESS
            }
            IoCommand::DatasetManagement { ranges, deallocate } => {
                let block = self
                    .namespace_of(i)
                    .map_or(512, |(ns, _)| u64::from(ns.ns.block_size()));
                match (deallocate, self.data_buf(i)) {
                    (false, _) => Status::SUCCESS,
                    (true, None) => Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr(),
                    (true, Some(buf)) => match io::parse_dsm_ranges(self.bytes(buf), ranges, nlb) {
                        Ok(list) => {
                            for r in list {
                                store.zero(r.slba * block, u64::from(r.nlb) * block);
                            }
                            Status::SUCCESS
                        }
                        Err(st) => st,
                    },
                }
            }
        };
        self.finish(i, status);
    }

    /// Dataset Management: with the Deallocate attribute, one hole punched per range of
    /// at least one block, all queued at once or none (a request never holds part of
    /// the ring while it waits for the rest).
    fn execute_deallocate(
        &mut self,
        i: usize,
        file: u32,
        ranges: u32,
        deallocate: bool,
        nlb: u64,
        block_size: u64,
    ) -> Exec {
        if !deallocate {
            self.finish(i, Status::SUCCESS);
            return Exec::Moved;
        }
        let Some(buf) = self.data_buf(i) else {
            self.finish(
                i,
                Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr(),
            );
            return Exec::Moved;
        };
        let list = match io::parse_dsm_ranges(self.bytes(buf), ranges, nlb) {
            Ok(l) => l,
            Err(st) => {
                self.finish(i, st);
                return Exec::Moved;
            }
        };
        let n = list.iter().filter(|r| r.nlb > 0).count();
        if n == 0 {
            self.finish(i, Status::SUCCESS);
            return Exec::Moved;
        }
        if n > self.cfg.io_slots as usize {
            self.finish(i, Status::generic(GenericStatus::InvalidField).with_dnr());
            return Exec::Moved;
        }
        if (self.io_slots_free as usize) < n {
            return Exec::Wait;
        }
        let ops = list
            .into_iter()
            .filter(|r| r.nlb > 0)
            .map(|r| IoOp::Fallocate {
                file,
                mode: FALLOC_DEALLOCATE,
                offset: r.slba * block_size,
                len: u64::from(r.nlb) * block_size,
            });
        self.submit(i, i as u32, ops, n as u32);
        Exec::Moved
    }

    /// Hands `n` io_uring operations of request `i` to the driver.
    fn submit(&mut self, i: usize, req: u32, ops: impl Iterator<Item = IoOp>, n: u32) {
        self.io_slots_free -= n;
        self.reqs[i].io_pending = n;
        for op in ops {
            self.actions.push_back(Action::SubmitIo { req, op });
        }
        self.set_state(i, ReqState::Executing);
    }

    /// Completes the Fabrics Disconnect waiting on queue `qpn` (every other command of
    /// the queue is answered): the queue leaves its controller, so its queue ID may be
    /// connected again (NVMe Base 2.x §6.4), and the Disconnect completes with success.
    pub(super) fn complete_disconnect(&mut self, qpn: u32, now: Instant) {
        let Some(q) = self.queues.get_mut(&qpn) else {
            return;
        };
        let Some(j) = q.disconnect.take() else {
            return;
        };
        if let Some(ctrl) = q.ctrl.take() {
            ctrl.release_queue(q.qid);
        }
        let j = j as usize;
        if self.reqs[j].state == ReqState::AwaitingEvent {
            self.finish(j, Status::SUCCESS);
            self.advance(j, now);
        }
    }

    /// Completes held Asynchronous Event Requests of queue `qpn` for which its
    /// controller has an event (NVMe Base 2.x §5.2).
    pub(super) fn complete_events(&mut self, qpn: u32, now: Instant) {
        let Some(ctrl) = self.queues.get(&qpn).and_then(|q| q.ctrl.clone()) else {
            return;
        };
        while let Some(aer) = ctrl.take_aer() {
            let held = self.reqs.iter().position(|r| {
                r.state == ReqState::AwaitingEvent && r.qpn == qpn && r.sqe.cid() == aer.cid
            });
            if let Some(j) = held {
                self.reqs[j].dw0 = aer.dw0;
                self.finish(j, Status::SUCCESS);
                self.advance(j, now);
            }
        }
    }
}
