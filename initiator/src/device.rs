//! The host's RDMA device on any provider, from [`HostOptions`]: the local address
//! (`local_ip`, or the kernel's source address toward the target), one poll group for
//! the admin queue and one per I/O queue, and the soft provider's fault injection
//! (`HostOptions::faults`), which no other provider has.
use std::any::Any;
use std::sync::Arc;

use transport::verbs::{DeviceOf, Provider};

use crate::error::HostError;
use crate::options::HostOptions;

/// Poll groups the host uses: poll group 0 for the admin queue, poll group `i` for I/O
/// queue `i`.
pub fn poll_groups(opts: &HostOptions) -> u32 {
    1 + u32::from(opts.io_queues)
}

/// Provider `P`'s configuration of the host's device ([`Provider::device_config`] on
/// the local address with [`poll_groups`] poll groups), with `opts.faults` applied when
/// `P` is the soft provider.
///
/// Errors: [`HostError::Device`] when the local address cannot be resolved (no route
/// to the target); [`HostError::InvalidArgument`] for fault injection on a provider
/// other than the soft one.
pub fn device_config<P: Provider>(opts: &HostOptions) -> Result<P::DeviceConfig, HostError> {
    let ip = opts.resolve_local_ip()?;
    let mut cfg = P::device_config(ip, poll_groups(opts));
    if let Some(faults) = opts.faults {
        // Fault injection is the soft provider's own option (its receive path): set it
        // when the configuration is the soft one, refuse it on any other.
        match (&mut cfg as &mut dyn Any).downcast_mut::<transport::soft::DeviceConfig>() {
            Some(soft) => soft.faults = Some(faults),
            None => {
                return Err(HostError::InvalidArgument(format!(
                    "fault injection (HostOptions::faults, nvmf-bench --inject-*) exists on \
                     the soft provider only, not on the {} provider: drop it or use the \
                     soft provider",
                    P::NAME
                )))
            }
        }
    }
    if opts.packet_path != transport::soft::xdp::PacketPath::Udp {
        match (&mut cfg as &mut dyn Any).downcast_mut::<transport::soft::DeviceConfig>() {
            Some(soft) => soft.packet_path = opts.packet_path.clone(),
            None => {
                return Err(HostError::InvalidArgument(format!(
                    "the AF_XDP packet path (HostOptions::packet_path, nvmf-bench \
                     --packet-path) exists on the soft provider only, not on the {} \
                     provider: drop it or use the soft provider",
                    P::NAME
                )))
            }
        }
    }
    Ok(cfg)
}

/// Opens provider `P`'s device for `opts` ([`device_config`]).
///
/// Errors: those of [`device_config`]; [`HostError::Device`] with the provider's
/// reason and fix when the device cannot be opened (soft: the address's UDP port 4791
/// in use or not an address of this machine; verbs: no RDMA device, no RoCE v2 GID
/// for the address, the port down).
pub fn open_device<P: Provider>(opts: &HostOptions) -> Result<Arc<DeviceOf<P>>, HostError> {
    let cfg = device_config::<P>(opts)?;
    P::open(&cfg).map_err(|e| {
        HostError::Device(format!(
            "opening the {} RDMA device on {}: {e}",
            P::NAME,
            opts.local_ip
                .map_or_else(|| "the local address".to_string(), |ip| ip.to_string())
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use transport::soft::{FaultConfig, SoftProvider};

    fn opts() -> HostOptions {
        let mut o = HostOptions::new("127.0.0.2:4420".parse().unwrap(), "nqn.x");
        o.local_ip = Some("127.0.0.3".parse().unwrap());
        o.io_queues = 3;
        o
    }

    #[test]
    fn the_soft_configuration_has_a_poll_group_per_queue_and_the_faults() {
        let mut o = opts();
        let cfg = device_config::<SoftProvider>(&o).unwrap();
        assert_eq!(
            (cfg.ip, cfg.rx_queues, cfg.faults),
            (o.local_ip.unwrap(), 4, None)
        );
        let f = FaultConfig {
            loss: 0.01,
            ..FaultConfig::with_seed(7)
        };
        o.faults = Some(f);
        let cfg = device_config::<SoftProvider>(&o).unwrap();
        assert_eq!(cfg.faults, Some(f));
    }
}
