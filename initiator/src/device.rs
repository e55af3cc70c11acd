//! The host's RDMA device on any provider, from [`HostOptions`]: the local address
//! (`local_ip`, or the kernel's source address toward the target), one poll group for
//! the admin queue and one per I/O queue, and the provider's own options
//! ([`Provider::Options`]: the soft provider's fault injection and packet path), which
//! no other provider has and which therefore are not [`HostOptions`].
use std::sync::Arc;

use transport::verbs::{DeviceOf, Provider};

use crate::error::HostError;
use crate::options::HostOptions;

/// Poll groups the host uses: poll group 0 for the admin queue, poll group `i` for I/O
/// queue `i`.
pub fn poll_groups(opts: &HostOptions) -> u32 {
    1 + u32::from(opts.io_queues)
}

/// Provider `P`'s configuration of the host's device
/// ([`Provider::device_config_with`] on the local address with [`poll_groups`] poll
/// groups and the provider's `options`).
///
/// Errors: [`HostError::Device`] when the local address cannot be resolved (no route
/// to the target).
pub fn device_config<P: Provider>(
    opts: &HostOptions,
    options: &P::Options,
) -> Result<P::DeviceConfig, HostError> {
    let ip = opts.resolve_local_ip()?;
    Ok(P::device_config_with(ip, poll_groups(opts), options))
}

/// Opens provider `P`'s device for `opts` and the provider's `options`
/// ([`device_config`]).
///
/// Errors: those of [`device_config`]; [`HostError::Device`] with the provider's
/// reason and fix when the device cannot be opened (soft: the address's UDP port 4791
/// in use or not an address of this machine; verbs: no RDMA device, no RoCE v2 GID
/// for the address, the port down).
pub fn open_device<P: Provider>(
    opts: &HostOptions,
    options: &P::Options,
) -> Result<Arc<DeviceOf<P>>, HostError> {
    let cfg = device_config::<P>(opts, options)?;
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
    use transport::soft::{FaultConfig, SoftOptions, SoftProvider};

    fn opts() -> HostOptions {
        let mut o = HostOptions::new("127.0.0.2:4420".parse().unwrap(), "nqn.x");
        o.local_ip = Some("127.0.0.3".parse().unwrap());
        o.io_queues = 3;
        o
    }

    #[test]
    fn the_soft_configuration_has_a_poll_group_per_queue_and_the_faults() {
        let o = opts();
        let cfg = device_config::<SoftProvider>(&o, &SoftOptions::default()).unwrap();
        assert_eq!(
            (cfg.ip, cfg.rx_queues, cfg.faults),
            (o.local_ip.unwrap(), 4, None)
        );
        let f = FaultConfig {
            loss: 0.01,
            ..FaultConfig::with_seed(7)
        };
        let soft = SoftOptions {
            faults: Some(f),
            ..SoftOptions::default()
        };
        let cfg = device_config::<SoftProvider>(&o, &soft).unwrap();
        assert_eq!(cfg.faults, Some(f));
    }
}
