//! Whether the desired state at hand may still start controller operations. The server
//! hands a controller operation to a host it holds alive, and to another once it marked
//! the host lost, one heartbeat TTL after it last heard from it. An agent that was paused
//! (a frozen process, a stalled VM) past that time may hold a desired state that lists an
//! operation the server has since given to another host, and maybe finished: a CreateVolume
//! run from it now makes a volume that nothing records. So a controller operation starts
//! only while a heartbeat or registration sent less than a TTL ago was answered, the node
//! not lost; otherwise the core waits for the next answer (after a registration, for the
//! desired state fetched after it too). The server is the one that makes it exact: it
//! deletes what a late CreateVolume answer made.

use std::time::{Duration, Instant};

/// The last heartbeat or registration the server answered with the node not lost: when
/// it was sent, and the heartbeat TTL the server gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heard {
    pub sent: Instant,
    pub ttl: Duration,
}

/// Whether controller operations may start at `now`. `None`: no session reports contact
/// (a core driven directly), which follows what it is given.
pub(super) fn may_start_ops(heard: Option<Heard>, now: Instant) -> bool {
    heard.is_none_or(|h| now.saturating_duration_since(h.sent) < h.ttl)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_start_only_within_a_ttl_of_a_heartbeat_sent() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(1);
        let h = Some(Heard { sent: t0, ttl });
        assert!(may_start_ops(h, t0));
        assert!(may_start_ops(h, t0 + Duration::from_millis(999)));
        // Paused past the TTL: the server may have marked the node lost and given its
        // operations to another host.
        assert!(!may_start_ops(h, t0 + ttl));
        assert!(!may_start_ops(h, t0 + Duration::from_secs(3)));
        // The next answer opens it again.
        let later = Some(Heard {
            sent: t0 + Duration::from_secs(3),
            ttl,
        });
        assert!(may_start_ops(later, t0 + Duration::from_millis(3100)));
        // A core no session drives follows what it is given.
        assert!(may_start_ops(None, t0 + Duration::from_secs(3600)));
    }
}
