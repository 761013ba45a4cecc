//! Where a csivol client may send its token: the one rule of every client (the CLI, the
//! node agent, dev mode, the tests and the benchmark), applied to the address as parsed,
//! never to its text.
//!
//! - `https://` goes anywhere: the server's certificate is verified.
//! - `http://` goes only to a loopback address: an IPv4 address in 127.0.0.0/8, `::1`
//!   (or `::ffff:127.x.y.z`), or the name `localhost`, which is never looked up: the
//!   client connects to 127.0.0.1 or ::1 for it (see [`LOCALHOST`]), so neither a hosts
//!   file nor a DNS answer can send it elsewhere. Any other name is refused, even one that
//!   resolves to loopback today: what it resolves to can change between the check and
//!   the connection.
//! - An address with a user before its host (`http://[::1]@host:7420`) is refused
//!   outright: the request would go to the host after the `@`, whatever the text before
//!   it looks like, and csivol sends a token, never a user name or password.
//! - A bare `HOST:PORT` (no scheme) means `https://` when the caller was given a CA,
//!   else `http://` when the host is a loopback address; anything else is refused with
//!   the address to write instead.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;

/// What `localhost` connects to, in order: it is never looked up (port 0: the URL's).
pub const LOCALHOST: [SocketAddr; 2] = [
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
    SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 0),
];

/// Why a server address is refused; [`AddressError::hint`] says what to write instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("invalid server address `{addr}`: {why}")]
    Invalid { addr: String, why: String },
    /// `USER@` before the host.
    #[error(
        "server address `{addr}` names a user before its host: the request would go to \
         {host}, and a server address takes no user name or password"
    )]
    UserInfo {
        addr: String,
        host: String,
        /// The address without the user.
        instead: String,
    },
    /// `http://` to a host that is not a loopback address.
    #[error(
        "refusing to send a token over plain HTTP to {host}, which is not a loopback \
         address: it would cross the network in clear"
    )]
    PlainOffLoopback { host: String, https: String },
    /// No scheme, no CA, and a host that is not a loopback address.
    #[error(
        "server address `{addr}` has no scheme, and without a CA it would be plain HTTP, \
         which is only for a loopback address, not {host}"
    )]
    Bare { addr: String, host: String },
}

impl AddressError {
    /// The next step, for a `hint:` line.
    pub fn hint(&self) -> String {
        match self {
            Self::Invalid { .. } => {
                "give the server's URL, e.g. https://10.0.0.1:7420 (or http://127.0.0.1:7420 \
                 on this machine)"
                    .to_owned()
            }
            Self::UserInfo { instead, .. } => {
                format!("give the server as scheme://host:port, without `USER@`: {instead}")
            }
            Self::PlainOffLoopback { https, .. } => format!(
                "use {https} and give the CA that signed the server's certificate with \
                 --ca-cert (`csivol-server tls init` makes both); plain http:// is only for \
                 127.0.0.0/8, ::1 and localhost"
            ),
            Self::Bare { addr, .. } => format!(
                "write https://{addr}, or give the CA that signed the server's certificate \
                 with --ca-cert (a bare address is then https)"
            ),
        }
    }
}

/// Whether `url`'s host, as parsed, is a loopback address or `localhost`.
pub fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    // The URL parser has made every IPv4 form (`127.1`, `0x7f.0.0.1`) dotted decimal and
    // bracketed every IPv6 address, so what parses here is the address it connects to.
    let ip = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse::<IpAddr>();
    match ip {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => host == "localhost",
    }
}

/// Checks a server URL (with its scheme) against the rule and returns it parsed.
pub fn check(addr: &str) -> Result<Url, AddressError> {
    let invalid = |why: String| AddressError::Invalid {
        addr: addr.to_owned(),
        why,
    };
    let url = Url::parse(addr).map_err(|e| invalid(e.to_string()))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(invalid(
            "only http:// and https:// are supported".to_owned(),
        ));
    }
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(invalid("no host".to_owned()));
    };
    let host_port = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    if !url.username().is_empty() || url.password().is_some() {
        // What to write instead: the same scheme where the rule allows it, else https.
        let scheme = match url.scheme() == "https" || is_loopback(&url) {
            true => url.scheme(),
            false => "https",
        };
        return Err(AddressError::UserInfo {
            addr: addr.to_owned(),
            instead: format!("{scheme}://{host_port}"),
            host: host_port,
        });
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "a server address has no `?` or `#` part".to_owned(),
        ));
    }
    if url.scheme() == "http" && !is_loopback(&url) {
        return Err(AddressError::PlainOffLoopback {
            host: host.to_owned(),
            https: format!("https://{host_port}"),
        });
    }
    Ok(url)
}

/// A server address as a person gives it: a URL (see [`check`]), or a bare `HOST:PORT`,
/// which is `https://` when `ca_given`, else `http://` on a loopback address, else refused.
pub fn resolve(addr: &str, ca_given: bool) -> Result<Url, AddressError> {
    let addr = addr.trim();
    if addr.contains("://") {
        return check(addr);
    }
    if ca_given {
        return check(&format!("https://{addr}"));
    }
    // Parsed as https first: that is the scheme a refusal recommends, and a parse error
    // (or a `USER@`) is reported for the address as written.
    let parsed = check(&format!("https://{addr}")).map_err(|e| match e {
        AddressError::Invalid { why, .. } => AddressError::Invalid {
            addr: addr.to_owned(),
            why,
        },
        AddressError::UserInfo { host, instead, .. } => AddressError::UserInfo {
            addr: addr.to_owned(),
            host,
            instead,
        },
        other => other,
    })?;
    if !is_loopback(&parsed) {
        return Err(AddressError::Bare {
            addr: addr.to_owned(),
            host: parsed.host_str().unwrap_or_default().to_owned(),
        });
    }
    check(&format!("http://{addr}"))
}

/// `url` as a client's base: without a trailing slash.
pub fn base(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_to_loopback() {
        for (addr, ok) in [
            ("http://127.0.0.1:7420", true),
            ("http://127.3.4.5:1", true),
            ("http://127.1:7420", true),
            ("http://0x7f.0.0.1:7420", true),
            ("http://[::1]:7420", true),
            ("http://[::ffff:127.0.0.1]:7420", true),
            ("http://localhost:7420", true),
            ("http://LOCALHOST:7420", true),
            ("https://10.0.0.1:7420", true),
            ("https://csivol.internal:7420", true),
            ("https://csivol.internal:7420/prefix", true),
            ("http://10.0.0.1:7420", false),
            ("http://192.0.2.1:7420", false),
            ("http://[::ffff:10.0.0.1]:7420", false),
            ("http://localhost.:7420", false),
            ("http://localhost.example.com:7420", false),
            ("http://127.0.0.1.nip.io:7420", false),
            ("http://[::1]@192.0.2.1:7420", false),
            ("http://127.0.0.1@192.0.2.1:7420", false),
            ("http://127.0.0.1:7420@192.0.2.1:7420", false),
            ("https://user:pw@10.0.0.1:7420", false),
            ("http://user@127.0.0.1:7420", false),
            ("http://127.0.0.1:7420?x=1", false),
            ("ftp://127.0.0.1", false),
            ("http://", false),
        ] {
            assert_eq!(check(addr).is_ok(), ok, "{addr}: {:?}", check(addr));
        }
    }

    #[test]
    fn the_userinfo_trick_names_the_real_host() {
        let e = check("http://[::1]@192.0.2.1:7420").unwrap_err();
        assert_eq!(
            e,
            AddressError::UserInfo {
                addr: "http://[::1]@192.0.2.1:7420".to_owned(),
                host: "192.0.2.1:7420".to_owned(),
                instead: "https://192.0.2.1:7420".to_owned(),
            }
        );
        assert!(
            e.to_string()
                .contains("the request would go to 192.0.2.1:7420"),
            "{e}"
        );
        let e = check("http://192.0.2.1:7420").unwrap_err();
        assert!(
            e.hint().contains("use https://192.0.2.1:7420"),
            "{}",
            e.hint()
        );
    }

    #[test]
    fn bare_addresses() {
        let ok = |addr: &str, ca: bool| resolve(addr, ca).map(|u| base(&u));
        assert_eq!(
            ok("127.0.0.1:7420", false).unwrap(),
            "http://127.0.0.1:7420"
        );
        assert_eq!(ok("[::1]:7420", false).unwrap(), "http://[::1]:7420");
        assert_eq!(
            ok("localhost:7420", false).unwrap(),
            "http://localhost:7420"
        );
        assert_eq!(
            ok("127.0.0.1:7420", true).unwrap(),
            "https://127.0.0.1:7420"
        );
        assert_eq!(ok("10.0.0.1:7420", true).unwrap(), "https://10.0.0.1:7420");
        assert_eq!(
            ok("http://h:1/", true).unwrap_err().to_string(),
            check("http://h:1/").unwrap_err().to_string()
        );
        assert_eq!(ok("https://h:1", false).unwrap(), "https://h:1");
        let e = resolve("10.0.0.1:7420", false).unwrap_err();
        assert_eq!(
            e,
            AddressError::Bare {
                addr: "10.0.0.1:7420".to_owned(),
                host: "10.0.0.1".to_owned()
            }
        );
        assert!(e.hint().contains("https://10.0.0.1:7420"), "{}", e.hint());
        assert!(matches!(
            resolve("[::1]@192.0.2.1:7420", false),
            Err(AddressError::UserInfo { .. })
        ));
        assert!(matches!(
            resolve("[::1]@192.0.2.1:7420", true),
            Err(AddressError::UserInfo { .. })
        ));
    }
}
