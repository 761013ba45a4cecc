//! `GET /v1/nodes/{node}/channel`: a node agent's connection for its whole conversation
//! (the line protocol is `csivol_api::channel`). An idle node otherwise holds a hyper
//! connection open for its desired-state long-poll, with hyper's read and write buffers
//! (24 KiB and more); after the upgrade the connection is a socket and one small task.
//! Heartbeats arrive as `hb` lines and are answered by the same code as `POST .../heartbeat`;
//! in version 2, reports arrive as `report` lines and are committed as `POST .../reports`
//! commits them, and a change of the node's desired state is pushed as the changed volumes'
//! entries, so that a claim costs the agent no request at all. In version 1 only the
//! node's desired index is pushed, after which the agent fetches the changes. In version 3
//! the agent also sends `stats` lines (usage samples, call counts), which are kept in the
//! server's memory and not answered.
//!
//! Lines are answered in the order they came, one at a time: a heartbeat behind a report
//! waits for the report's commit, which the agent's deadline for a heartbeat's answer (a
//! quarter of the TTL) leaves room for; past it the agent closes the channel and sends the
//! heartbeat as a request, to another server first where it has one. When a report's
//! commit changed the node's desired state, the push of that change follows the report's
//! answer in the same write, so that the agent reads both at one wake-up.

use std::time::{Duration, Instant};

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::http::header::{AUTHORIZATION, CONNECTION, UPGRADE};
use axum::response::Response;
use csivol_api::ReportBatch;
use csivol_api::channel::{self, AgentLine, ServerLine, Version};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::agent::{apply_reports, heartbeat, record_stats};
use super::error;
use super::extract::name;
use super::listen::Closing;
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle;
use crate::watch::Key;

/// How long closing a channel may take.
const SHUTDOWN: Duration = Duration::from_secs(1);

pub(super) async fn open(
    State(app): State<App>,
    Path(node): Path<String>,
    mut req: Request,
) -> ApiResult<Response> {
    if !app.node_channel {
        // What an older server answers, so agents take the same fallback.
        return Err(ApiError::not_found("no such endpoint")
            .with_hint("this server runs with --no-node-channel"));
    }
    let headers = req.headers();
    name("node", &node)?;
    let asks = |h, want: &str| {
        headers.get_all(h).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(want)))
        })
    };
    let version = Version::chosen(
        headers
            .get_all(UPGRADE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(',')),
    );
    let Some(version) = version.filter(|_| asks(CONNECTION, "upgrade")) else {
        let e = ApiError::invalid(format!(
            "the node channel needs `Connection: upgrade` and `Upgrade: {}` (or `{}`)",
            channel::UPGRADE_V2,
            channel::UPGRADE
        ));
        return Ok(error::with_status(&e, StatusCode::UPGRADE_REQUIRED));
    };
    // Kept to check the token again at every heartbeat, as `POST .../heartbeat` does: a
    // revoked token ends the channel at the next one.
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let on_upgrade = req
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or_else(|| ApiError::internal("this connection cannot be upgraded"))?;
    let closing = req.extensions().get::<Closing>().cloned();
    // The channel replaces the node's long-poll and takes its place in that budget.
    let permit = app.long_poll(true)?;
    tokio::spawn(async move {
        let _permit = permit;
        match on_upgrade.await {
            Ok(io) => {
                app.metrics.node_channels.inc();
                let mut io = TokioIo::new(io);
                let served = serve(&app, &node, &token, version, &mut io, closing).await;
                // Closed properly (TLS close_notify), however it ended.
                let _ = tokio::time::timeout(SHUTDOWN, io.shutdown()).await;
                app.metrics.node_channels.dec();
                if let Err(e) = served {
                    tracing::debug!(node, error = %e, "node channel closed");
                }
            }
            Err(e) => tracing::debug!(node, error = %e, "node channel upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(CONNECTION, "upgrade")
        .header(UPGRADE, version.upgrade())
        .body(axum::body::Body::empty())
        .map_err(|e| ApiError::internal(format!("failed to answer the upgrade: {e}")))
}

/// The channel until the agent closes it, goes silent for a TTL, breaks the protocol, or
/// the server stops.
async fn serve(
    app: &App,
    node: &str,
    token: &str,
    version: Version,
    io: &mut (impl AsyncRead + AsyncWrite + Unpin),
    closing: Option<Closing>,
) -> std::io::Result<()> {
    let key = Key::Node(node.to_owned());
    // A channel lives in one generation of the state: when it changes (the state went
    // back in time), the channel closes, and the agent, which fetches what it opens on,
    // fetches the whole state (it names the generation it holds, and an index of another
    // one is answered with the whole state; an older agent finds the index it holds ahead
    // of the one it opens on, and fetches the whole state as it always has then).
    let generation = app.db.hub.generation();
    let mut sent = app.db.hub.index(&key);
    // The agent does not say which state it holds: it fetches the first one itself.
    let hello = format!(
        "{}{}",
        ServerLine::Hello(version).encode(),
        ServerLine::Desired(sent).encode()
    );
    io.write_all(hello.as_bytes()).await?;
    let mut closing = closing.map(|c| c.0);
    let mut lines = channel::Lines::new(version.max_line());
    let mut heard = Instant::now();
    loop {
        // An agent heartbeats at a third of the TTL at most: one silent for a whole TTL is
        // gone (its node is lost by now), and its channel with it.
        let silence = app.live.ttl().saturating_sub(heard.elapsed());
        if silence.is_zero() {
            return Ok(());
        }
        tokio::select! {
            read = io.read(lines.space()) => {
                let n = read?;
                if n == 0 {
                    return Ok(());
                }
                lines.filled(n);
                heard = Instant::now();
                // The answers to the lines this read brought, and the push a report's
                // commit caused, leave in one write: the agent wakes once for them.
                let mut out = String::new();
                while let Some(line) = lines.next_line() {
                    let (answer, ends) = match line.and_then(|l| AgentLine::parse(&l, version)) {
                        Ok(AgentLine::Beat) => {
                            let answer = beat(app, node, token).await;
                            // A refused token or node ends the channel with the answer.
                            let ends = matches!(&answer, ServerLine::Refused { code, .. }
                                if *code != csivol_api::ErrorCode::NotFound);
                            (answer, ends)
                        }
                        Ok(AgentLine::Report(batch)) => {
                            // Answers already made do not wait for this report's commit.
                            if !out.is_empty() {
                                io.write_all(out.as_bytes()).await?;
                                out.clear();
                            }
                            let answer = report(app, node, token, batch).await;
                            // A refused report is the agent's to handle, as the request's
                            // answer would be; only a refused token ends the channel.
                            let ends = matches!(&answer, ServerLine::Refused { code, .. }
                                if *code == csivol_api::ErrorCode::Unauthorized);
                            (answer, ends)
                        }
                        Ok(AgentLine::Stats(stats)) => {
                            // Not answered: samples are kept in memory, nothing waits.
                            record_stats(app, node, &stats);
                            continue;
                        }
                        Err(e) => return Err(std::io::Error::other(e)),
                    };
                    out.push_str(&answer.encode());
                    if ends {
                        io.write_all(out.as_bytes()).await?;
                        return Ok(());
                    }
                }
                if app.db.hub.generation() != generation {
                    io.write_all(out.as_bytes()).await?;
                    return Ok(());
                }
                // A report whose commit changed this node's desired state (its unpublished
                // claim's volume is to be unstaged, say) is followed by that change at once.
                let index = app.db.hub.index(&key);
                if index > sent {
                    out.push_str(&push(app, node, version, sent, index).await);
                    sent = index;
                }
                io.write_all(out.as_bytes()).await?;
            }
            index = app.db.hub.wait(&key, sent, silence) => {
                if app.db.hub.generation() != generation {
                    return Ok(());
                }
                if index > sent {
                    let line = push(app, node, version, sent, index).await;
                    sent = index;
                    io.write_all(line.as_bytes()).await?;
                }
            }
            () = closed(&mut closing) => return Ok(()),
        }
    }
}

/// What the channel sends when the node's desired state moved from `sent` (the index
/// pushed last) to `index`: the index (version 1), or the changes (version 2, [`pushed`]).
async fn push(app: &App, node: &str, version: Version, sent: u64, index: u64) -> String {
    match version {
        Version::V1 => ServerLine::Desired(index).encode(),
        Version::V2 | Version::V3 => pushed(app, node, sent, index).await,
    }
}

/// The most a pushed `changes` line may be: what a few volumes' entries take. More is
/// fetched by request, which reads a large state on a blocking thread.
const MAX_PUSH: usize = 16 * 1024;

/// What a version 2 channel sends when the node's desired state moved from `sent` (the
/// index pushed last) to `index`, encoded: the changed volumes' entries, or, when the
/// server cannot say which volumes changed, the read fails, or the entries are too many for
/// a line, `desired <index>` (the agent fetches the state by request then).
async fn pushed(app: &App, node: &str, sent: u64, index: u64) -> String {
    let fetch = || ServerLine::Desired(index).encode();
    // As in `GET .../desired?since=`: which volumes changed is read after the index, so
    // that it covers every change up to it.
    let Some(volumes) = app.db.hub.node_changes(node, sent) else {
        return fetch();
    };
    let generation = app.db.hub.generation();
    let read = (app.db)
        .read_small(|c| lifecycle::desired_changes(c, node, index, sent, volumes))
        .await;
    match read {
        Ok(mut state) => {
            state.generation = Some(generation.text());
            let line = ServerLine::Changes(Box::new(state)).encode();
            if line.len() <= MAX_PUSH {
                app.metrics.desired_pushes.inc();
                line
            } else {
                fetch()
            }
        }
        Err(e) => {
            tracing::debug!(node, error = %e, "desired changes not pushed; the agent fetches them");
            fetch()
        }
    }
}

/// Resolves when the server begins to stop (never without the accept loop's signal).
async fn closed(closing: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match closing {
        Some(c) => {
            let _ = c.wait_for(|c| *c).await;
        }
        None => std::future::pending().await,
    }
}

/// A heartbeat line's answer: the token checked as on every request, then [`heartbeat`].
async fn beat(app: &App, node: &str, token: &str) -> ServerLine {
    let allowed = app
        .tokens
        .authenticate(Some(token), app.clock.now_ms())
        .and_then(|caller| caller.require_node(node));
    let answer = match allowed {
        Ok(()) => heartbeat(app, node, true).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(hb) => ServerLine::Beat(hb),
        Err(e) => ServerLine::Refused {
            code: e.code(),
            message: e.message,
        },
    }
}

/// A report line's answer: the token checked as on every request, then the batch committed
/// as `POST .../reports` commits it.
async fn report(app: &App, node: &str, token: &str, batch: ReportBatch) -> ServerLine {
    let allowed = app
        .tokens
        .authenticate(Some(token), app.clock.now_ms())
        .and_then(|caller| caller.require_node(node));
    let answer = match allowed {
        Ok(()) => apply_reports(app, node, batch, true).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(count) => ServerLine::Reported(count as u64),
        Err(e) => ServerLine::Refused {
            code: e.code(),
            message: e.message,
        },
    }
}
