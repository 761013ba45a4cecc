//! Read consistency, for every `GET` in one place: an answer reflects every write
//! acknowledged before the request arrived, through any server. With the SQLite store that
//! holds by itself (one server, one database); with etcd the server first catches its
//! mirror up with etcd's last commit (`replicated::Reads`). `?stale=true` skips that for a
//! cheaper answer that may miss the last writes made through other servers.
//!
//! Blocking queries are made consistent before they wait, and then wake on the changes
//! their index names, as before.

use axum::extract::{Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::Response;

use crate::app::App;
use crate::error::{ApiError, ApiResult};

/// Routes that read no cluster state, or only this server's own view of it: health (which
/// must answer while etcd does not), metrics (this server's counters and its view, scraped
/// when things go wrong), and the node channel's upgrade.
fn exempt(path: &str) -> bool {
    matches!(path, "/v1/health" | "/v1/metrics")
        || path
            .strip_prefix("/v1/nodes/")
            .and_then(|p| p.strip_suffix("/channel"))
            .is_some_and(|node| !node.contains('/'))
}

/// The middleware: takes `stale` out of the query (handlers never see it), then makes the
/// read consistent unless it was `true`.
pub(super) async fn consistent(
    State(app): State<App>,
    mut req: Request,
    next: Next,
) -> ApiResult<Response> {
    if req.method() != Method::GET {
        return Ok(next.run(req).await);
    }
    if exempt(req.uri().path()) {
        return Ok(next.run(req).await);
    }
    let stale = match take_stale(req.uri())? {
        Some((uri, stale)) => {
            *req.uri_mut() = uri;
            stale
        }
        None => false,
    };
    if !stale && let Some(reads) = &app.reads {
        let started = std::time::Instant::now();
        reads.catch_up().await?;
        app.metrics
            .read_catch_up_seconds
            .observe(started.elapsed().as_secs_f64());
    }
    Ok(next.run(req).await)
}

/// `uri` without its `stale` parameter, and whether it asked for a stale read; `None` when
/// it has none (most requests: the URI is then left as it came, not rebuilt and parsed).
fn take_stale(uri: &Uri) -> ApiResult<Option<(Uri, bool)>> {
    let Some(query) = uri.query() else {
        return Ok(None);
    };
    let is_stale = |pair: &str| pair == "stale" || pair.starts_with("stale=");
    if !query.split('&').any(is_stale) {
        return Ok(None);
    }
    let mut stale = false;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=').unwrap_or((pair, "true")) {
            ("stale", "true") => stale = true,
            ("stale", "false") => stale = false,
            ("stale", other) => {
                return Err(ApiError::bad_request(format!("invalid `stale` `{other}`"))
                    .with_hint("use stale=true for a possibly stale answer, or leave it out"));
            }
            _ => kept.push(pair),
        }
    }
    let path = uri.path();
    let rebuilt = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let uri = rebuilt
        .parse()
        .map_err(|e| ApiError::bad_request(format!("invalid request URI: {e}")))?;
    Ok(Some((uri, stale)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(uri: &str) -> (String, bool) {
        let uri: Uri = uri.parse().unwrap();
        match take_stale(&uri).unwrap() {
            Some((u, stale)) => (u.to_string(), stale),
            None => (uri.to_string(), false),
        }
    }

    #[test]
    fn stale_is_taken_out_of_the_query() {
        assert_eq!(check("/v1/volumes/v"), ("/v1/volumes/v".into(), false));
        assert_eq!(
            check("/v1/volumes/v/claims/a?index=3&wait=1s"),
            ("/v1/volumes/v/claims/a?index=3&wait=1s".into(), false)
        );
        assert!(
            take_stale(&"/v1/claims?label=stale%3Dno&staleness=1".parse().unwrap())
                .unwrap()
                .is_none(),
            "a query without `stale` is left alone"
        );
        assert_eq!(
            check("/v1/volumes/v?stale=true"),
            ("/v1/volumes/v".into(), true)
        );
        assert_eq!(check("/v1/volumes/v?stale"), ("/v1/volumes/v".into(), true));
        assert_eq!(
            check("/v1/volumes/v/claims/a?index=3&stale=false&wait=1s"),
            ("/v1/volumes/v/claims/a?index=3&wait=1s".into(), false)
        );
        assert_eq!(
            check("/v1/claims?label=ci%3Dyes&stale=true"),
            ("/v1/claims?label=ci%3Dyes".into(), true)
        );
        assert!(exempt("/v1/nodes/n1/channel") && exempt("/v1/health"));
        assert!(!exempt("/v1/nodes/n1/desired") && !exempt("/v1/volumes/channel"));
        let bad = take_stale(&"/v1/volumes?stale=yes".parse().unwrap()).unwrap_err();
        assert!(
            bad.message.contains("invalid `stale` `yes`"),
            "{}",
            bad.message
        );
    }
}
