//! In-band authentication of a queue after its Connect (NVMe Base 2.x §8.13, as
//! Linux's `nvme_auth_negotiate`): when the Connect response asks for it (AUTHREQ,
//! DW0 bits 17 and 18), the host runs the DH-HMAC-CHAP transaction of
//! [`dhchap::HostAuth`] over Authentication Send (Fabrics 05h) and Receive (06h)
//! commands on that queue, before any other command there. A failure is a typed
//! [`HostError::Authentication`] naming the cause; the host's AUTH_Failure2 goes out
//! first when one is due.
use std::sync::atomic::{AtomicU16, Ordering};

use nvme::auth::{AuthCommand, CONNECT_AUTHREQ_ASCR, CONNECT_AUTHREQ_ATR};
use transport::verbs::Provider;

use crate::capsule::DataDir;
use crate::controller::{run_command, ControllerOptions};
use crate::error::HostError;
use crate::queue::NvmeRdmaQueue;

/// Transaction IDs, one per transaction of the process (Linux counts per controller).
static NEXT_T_ID: AtomicU16 = AtomicU16::new(0);

/// Runs the authentication `queue`'s Connect response DW0 `dw0` asks for, if it asks.
///
/// Errors: [`HostError::AuthenticationRequired`] without a host secret;
/// [`HostError::InvalidArgument`] when secure channel concatenation (ASCR) is asked
/// (this host has no TLS); [`HostError::Authentication`] when the transaction fails;
/// the commands' own errors (timeouts, transport).
pub fn authenticate_if_asked<P: Provider>(
    queue: &mut NvmeRdmaQueue<P>,
    opts: &ControllerOptions,
    dw0: u32,
) -> Result<(), HostError> {
    let qid = queue.qid();
    if dw0 & (CONNECT_AUTHREQ_ATR | CONNECT_AUTHREQ_ASCR) == 0 {
        return Ok(());
    }
    if dw0 & CONNECT_AUTHREQ_ASCR != 0 {
        return Err(HostError::InvalidArgument(format!(
            "queue {qid}: the target asks for secure channel concatenation (AUTHREQ.ASCR, \
             TLS), which this host does not do"
        )));
    }
    let Some(secrets) = opts.dhchap.clone() else {
        return Err(HostError::AuthenticationRequired { qid });
    };
    let t_id = NEXT_T_ID.fetch_add(1, Ordering::Relaxed);
    let mut auth = dhchap::HostAuth::new(secrets, &opts.hostnqn, &opts.subnqn, t_id);
    let fail = |source| HostError::Authentication { qid, source };
    send(queue, opts, &auth.negotiate())?;
    let challenge = receive(queue, opts)?;
    let reply = match auth.on_challenge(&challenge) {
        Ok(r) => r,
        Err(e) => return Err(give_up(queue, opts, &auth, fail(e))),
    };
    send(queue, opts, &reply)?;
    let success1 = receive(queue, opts)?;
    match auth.on_success1(&success1) {
        Ok(Some(success2)) => send(queue, opts, &success2)?,
        Ok(None) => {}
        Err(e) => return Err(give_up(queue, opts, &auth, fail(e))),
    }
    tracing::debug!(qid, t_id, "queue authenticated (DH-HMAC-CHAP)");
    Ok(())
}

/// Sends the AUTH_Failure2 the error calls for (its own failure is not reported over
/// the first one) and returns `e`.
fn give_up<P: Provider>(
    queue: &mut NvmeRdmaQueue<P>,
    opts: &ControllerOptions,
    auth: &dhchap::HostAuth,
    e: HostError,
) -> HostError {
    if let HostError::Authentication { source, .. } = &e {
        if let Some(f2) = auth.failure2(source) {
            let _ = send(queue, opts, &f2);
        }
    }
    e
}

fn send<P: Provider>(
    queue: &mut NvmeRdmaQueue<P>,
    opts: &ControllerOptions,
    msg: &[u8],
) -> Result<(), HostError> {
    let sqe = AuthCommand::Send {
        tl: msg.len() as u32,
    }
    .to_sqe(0);
    let data = DataDir::HostToController { len: msg.len() };
    run_command(
        queue,
        sqe,
        data,
        |b| b[..msg.len()].copy_from_slice(msg),
        opts.connect_timeout,
        &mut Vec::new(),
    )
    .map(|_| ())
}

fn receive<P: Provider>(
    queue: &mut NvmeRdmaQueue<P>,
    opts: &ControllerOptions,
) -> Result<Vec<u8>, HostError> {
    let len = dhchap::RECEIVE_LEN;
    let sqe = AuthCommand::Receive { al: len as u32 }.to_sqe(0);
    let (_, buf) = run_command(
        queue,
        sqe,
        DataDir::ControllerToHost { len },
        |_| {},
        opts.connect_timeout,
        &mut Vec::new(),
    )?;
    Ok(buf
        .map(|b| b[..len.min(b.len())].to_vec())
        .unwrap_or_default())
}
