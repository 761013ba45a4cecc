//! The settings' defaults, shared by the command line (dev mode's flags), the
//! configuration and dev mode's server.

use std::time::Duration;

/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";
/// How long a node stays `stopped` after its agent's planned stop (`--planned-stop-grace`).
pub const DEFAULT_PLANNED_STOP_GRACE: Duration = Duration::from_secs(600);
/// How long a request's headers may take to arrive (`--header-timeout`); an idle
/// keep-alive connection closes after it too.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request's body may take to arrive after its headers (`--body-timeout`): a
/// full 1 MiB body at 35 KiB/s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long request keys and claim tombstones are kept (`--request-memory`).
pub const DEFAULT_REQUEST_MEMORY: Duration = Duration::from_secs(24 * 3600);
/// How full a published volume may be, in percent of its bytes or inodes, before a
/// `volume-filling` event tells of it (`volume_filling_percent`).
pub const DEFAULT_VOLUME_FILLING_PERCENT: f64 = 85.0;
