//! The watch of pools' host names: a thread of the control plane looks up again, every
//! `dnsRefresh`, each host name whose addresses became nodes at load, and reloads the
//! configuration (as a `SIGHUP` does) when a name's addresses are no longer those it had. The
//! nodes of addresses that stay keep their health state and connections across the reload.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use turnpike_engine::Snapshot;
use turnpike_snapshot::DnsOrigin;

use crate::Manager;

/// How often the watch looks for names due for a lookup.
const TICK: Duration = Duration::from_millis(250);

/// The running watch; dropping it stops the thread.
pub struct DnsWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DnsWatch {
    /// Starts watching the host names of the configurations `manager` applies.
    pub fn start(manager: Weak<Manager>) -> std::io::Result<DnsWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("turnpike-dns-watch".into())
            .spawn(move || run(&manager, &flag))?;
        Ok(DnsWatch {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for DnsWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The host names of `snap`'s pools, each once (by name, port and how it is looked up).
fn origins(snap: &Snapshot) -> Vec<Arc<DnsOrigin>> {
    let mut seen: HashMap<(Arc<str>, u16, turnpike_dns::Dns), Arc<DnsOrigin>> = HashMap::new();
    for up in &snap.upstreams {
        for node in &up.nodes {
            if let Some(o) = &node.origin {
                seen.entry((Arc::clone(&o.host), o.port, o.dns.clone()))
                    .or_insert_with(|| Arc::clone(o));
            }
        }
    }
    seen.into_values().collect()
}

/// True when `now` (sorted) differs from the addresses `o` had at load.
fn changed(o: &DnsOrigin, now: &[IpAddr]) -> bool {
    *o.addrs != *now
}

fn run(manager: &Weak<Manager>, stop: &AtomicBool) {
    let mut due: HashMap<(Arc<str>, u16), Instant> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        let Some(m) = manager.upgrade() else { return };
        let snap = m.gateway().snapshot();
        let now = Instant::now();
        let mut reload = None;
        let names = origins(&snap);
        due.retain(|k, _| names.iter().any(|o| o.host == k.0 && o.port == k.1));
        for o in names {
            let next = due
                .entry((Arc::clone(&o.host), o.port))
                .or_insert(now + o.refresh);
            if *next > now {
                continue;
            }
            *next = now + o.refresh;
            match o.dns.lookup_blocking(&o.host, o.port) {
                Ok(found) => {
                    let mut ips: Vec<IpAddr> = found.iter().map(|a| a.ip()).collect();
                    ips.sort_unstable();
                    if changed(&o, &ips) {
                        reload = Some(format!(
                            "`{}` now has {}",
                            o.host,
                            ips.iter()
                                .map(IpAddr::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                        break;
                    }
                }
                // A failed lookup keeps the nodes of the last answer.
                Err(e) => tracing::warn!("looking up `{}` again failed: {e}", o.host),
            }
        }
        if let Some(why) = reload {
            tracing::info!("{why}: the configuration is reloaded");
            if let Err(errors) = m.reload("dns") {
                tracing::warn!("the reload for new addresses failed: {}", errors.join("; "));
            }
            // The new snapshot's names start their interval afresh.
            due.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_any_difference_in_the_sorted_addresses() {
        let o = DnsOrigin {
            host: "b.test".into(),
            port: 80,
            refresh: Duration::from_secs(1),
            addrs: vec![IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2])].into(),
            dns: turnpike_dns::Dns::System,
        };
        assert!(!changed(
            &o,
            &[IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2])]
        ));
        assert!(changed(&o, &[IpAddr::from([10, 0, 0, 1])]));
        assert!(changed(
            &o,
            &[
                IpAddr::from([10, 0, 0, 1]),
                IpAddr::from([10, 0, 0, 2]),
                IpAddr::from([10, 0, 0, 3])
            ]
        ));
    }
}
