//! The client end of a node's channel (the protocol is [`csivol_api::channel`]), opened by
//! [`crate::Client::channel`]: the upgraded connection, split so that one task can read
//! the server's lines while another writes heartbeats and reports, and [`Shared`], which
//! the node agent and the benchmark's simulated nodes use alike.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use csivol_api::channel::{AgentLine, HELLO, Lines, ServerLine, Version};
use csivol_api::{DesiredState, ErrorBody, ErrorCode, HeartbeatResponse, ReportBatch};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch};

use crate::Error;

/// Why a channel ended.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the channel broke: {0}")]
    Io(#[from] std::io::Error),
    #[error("the server closed the channel")]
    Closed,
    #[error("the server broke the channel protocol: {0}")]
    Protocol(String),
    #[error("a heartbeat or report on the channel went unanswered")]
    Unanswered,
}

/// An open channel, before its first line was read.
#[derive(Debug)]
pub struct Channel {
    io: reqwest::Upgraded,
}

/// The reading end: the server's lines.
#[derive(Debug)]
pub struct Reader {
    io: ReadHalf<reqwest::Upgraded>,
    lines: Lines,
    version: Version,
}

/// The writing end: heartbeats and reports.
#[derive(Debug)]
pub struct Writer {
    io: WriteHalf<reqwest::Upgraded>,
}

impl Channel {
    pub(crate) fn new(io: reqwest::Upgraded) -> Self {
        Self { io }
    }

    /// Reads the server's first line, which must name this protocol and a version the
    /// client asked for, and splits the channel.
    pub async fn start(self) -> Result<(Reader, Writer), ChannelError> {
        let (io, writer) = tokio::io::split(self.io);
        let mut reader = Reader {
            io,
            lines: Lines::default(),
            version: Version::V1,
        };
        match reader.recv().await? {
            ServerLine::Hello(version) => {
                reader.version = version;
                reader.lines.allow(version.max_line());
                Ok((reader, Writer { io: writer }))
            }
            other => Err(ChannelError::Protocol(format!(
                "expected `{HELLO}` first, got {other:?}"
            ))),
        }
    }
}

impl Reader {
    /// The version the server chose.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The next line from the server. Cancel-safe: a line that arrives in part stays for
    /// the next call.
    pub async fn recv(&mut self) -> Result<ServerLine, ChannelError> {
        loop {
            if let Some(line) = self.lines.next_line() {
                return line
                    .and_then(|l| ServerLine::parse(&l))
                    .map_err(ChannelError::Protocol);
            }
            let n = self.io.read(self.lines.space()).await?;
            if n == 0 {
                return Err(ChannelError::Closed);
            }
            self.lines.filled(n);
        }
    }
}

impl Writer {
    /// Sends a line (see [`AgentLine::encode`]).
    pub async fn send(&mut self, line: &str) -> Result<(), ChannelError> {
        self.io.write_all(line.as_bytes()).await?;
        self.io.flush().await?;
        Ok(())
    }
}

/// Where the answer to a line sent on the open channel goes.
#[derive(Debug)]
enum Answer {
    Beat(oneshot::Sender<Result<HeartbeatResponse, Error>>),
    Report(oneshot::Sender<Result<(), Error>>),
}

/// A line to send on the open channel, and where its answer goes (`None`: a line the
/// server does not answer).
type Ask = (String, Option<Answer>);

/// What a caller's loops see of the channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Open, and the server said at which index the node's desired state is.
    pub open: bool,
    /// The index the server last pushed (in `desired`, or as the index of `changes`).
    pub pushed: u64,
    /// The server pushes changes and takes reports (version 2).
    pub v2: bool,
    /// The server takes the node's stats (version 3).
    pub v3: bool,
}

/// The most pushed changes kept for the desired-state loop; one that falls behind further
/// fetches the state by request.
const PUSHED_KEPT: usize = 64;

/// A node's channel as its loops share it: [`Shared::serve`] runs an open channel, the
/// heartbeat loop sends through [`Shared::heartbeat`], the report loop through
/// [`Shared::report`], and the desired-state loop watches [`Shared::subscribe`] and takes
/// what was pushed with [`Shared::take_pushed`].
#[derive(Debug)]
pub struct Shared {
    asks: Mutex<Option<mpsc::Sender<Ask>>>,
    state: watch::Sender<State>,
    pushed: Mutex<VecDeque<DesiredState>>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            asks: Mutex::new(None),
            state: watch::channel(State::default()).0,
            pushed: Mutex::new(VecDeque::new()),
        }
    }
}

impl Shared {
    pub fn subscribe(&self) -> watch::Receiver<State> {
        self.state.subscribe()
    }

    pub fn is_open(&self) -> bool {
        self.state.borrow().open
    }

    fn asks(&self) -> std::sync::MutexGuard<'_, Option<mpsc::Sender<Ask>>> {
        self.asks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pushed(&self) -> std::sync::MutexGuard<'_, VecDeque<DesiredState>> {
        self.pushed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pushed changes that follow the state held, which is the server's as of `held`
    /// in `generation`: those whose `changes.since` is `held`, of that generation (when
    /// both name one). Older ones are dropped. `None` when none follows (nothing pushed, a
    /// gap, another generation): fetch the state by request.
    pub fn take_pushed(&self, held: u64, generation: Option<&str>) -> Option<DesiredState> {
        let mut pushed = self.pushed();
        while pushed.front().is_some_and(|d| d.index <= held) {
            pushed.pop_front();
        }
        let follows = pushed.front().is_some_and(|d| {
            let same = match (d.generation.as_deref(), generation) {
                (Some(pushed), Some(held)) => pushed == held,
                _ => true,
            };
            same && d.changes.as_ref().is_some_and(|c| c.since == held)
        });
        if follows { pushed.pop_front() } else { None }
    }

    /// Sends a line on the open channel and waits `within` for its answer. `None` when the
    /// channel is not open or closes before it answers; a channel that does not answer in
    /// time is closed (answers come in order, so a late one could not be told apart).
    async fn ask<T>(
        &self,
        line: String,
        answer: impl FnOnce(oneshot::Sender<Result<T, Error>>) -> Answer,
        within: Duration,
    ) -> Option<Result<T, Error>> {
        let asks = self.asks().clone()?;
        let (tx, rx) = oneshot::channel();
        asks.send((line, Some(answer(tx)))).await.ok()?;
        match tokio::time::timeout(within, rx).await {
            Ok(answer) => answer.ok(),
            Err(_) => {
                // Every sender dropped ends the channel (`serve` returns).
                self.asks().take();
                None
            }
        }
    }

    /// A heartbeat over the open channel, answered as `POST .../heartbeat` would be (a
    /// refusal is [`Error::Refused`] with the API's error code). `None` when the channel is
    /// not open, or closed before it answered: send the heartbeat as a request instead. A
    /// channel that does not answer within `within` is closed.
    pub async fn heartbeat(&self, within: Duration) -> Option<Result<HeartbeatResponse, Error>> {
        self.ask(AgentLine::Beat.encode(), Answer::Beat, within)
            .await
    }

    /// A batch of reports over the open channel, answered as `POST .../reports` would be.
    /// `None` when the channel is not open, is of version 1, the batch does not fit one
    /// line, or the channel closed before it answered: send the batch as a request instead
    /// (a batch may so arrive twice, as a resent request's may). A channel that does not
    /// answer within `within` is closed.
    pub async fn report(&self, batch: &ReportBatch, within: Duration) -> Option<Result<(), Error>> {
        if !self.state.borrow().v2 {
            return None;
        }
        let line = AgentLine::Report(batch.clone()).encode();
        if line.len() > Version::V2.max_line() {
            return None;
        }
        self.ask(line, Answer::Report, within).await
    }

    /// The node's stats over the open channel, which the server does not answer: `false`
    /// when the channel is not open, is older than version 3, or the stats do not fit one
    /// line (the caller sends fewer at a time). Stats are samples: ones not sent are
    /// replaced by the next, so they never go as a request.
    pub async fn stats(&self, stats: &csivol_api::NodeStats) -> bool {
        if !self.state.borrow().v3 {
            return false;
        }
        let line = AgentLine::Stats(Box::new(stats.clone())).encode();
        if line.len() > Version::V3.max_line() {
            return false;
        }
        let Some(asks) = self.asks().clone() else {
            return false;
        };
        asks.send((line, None)).await.is_ok()
    }

    /// Runs an open channel until it ends, and says why: the server closed or broke it,
    /// or a heartbeat or report went unanswered.
    pub async fn serve(&self, mut reader: Reader, mut writer: Writer) -> ChannelError {
        let (tx, mut asks) = mpsc::channel::<Ask>(1);
        *self.asks() = Some(tx);
        let v2 = reader.version() >= Version::V2;
        let v3 = reader.version() >= Version::V3;
        self.pushed().clear();
        // Lines sent, waiting for their answers, which come in order.
        let mut waiting: VecDeque<Answer> = VecDeque::new();
        let why = loop {
            tokio::select! {
                line = reader.recv() => match line {
                    Ok(ServerLine::Desired(index)) => self.state.send_modify(|s| {
                        s.open = true;
                        s.pushed = index;
                        s.v2 = v2;
                        s.v3 = v3;
                    }),
                    Ok(ServerLine::Changes(state)) if v2 => {
                        let index = state.index;
                        {
                            let mut pushed = self.pushed();
                            if pushed.len() == PUSHED_KEPT {
                                pushed.pop_front();
                            }
                            pushed.push_back(*state);
                        }
                        self.state.send_modify(|s| s.pushed = s.pushed.max(index));
                    }
                    Ok(ServerLine::Beat(hb)) => match waiting.pop_front() {
                        Some(Answer::Beat(w)) => {
                            let _ = w.send(Ok(hb));
                        }
                        other => break unexpected("a heartbeat's answer", other),
                    },
                    Ok(ServerLine::Reported(_)) if v2 => match waiting.pop_front() {
                        Some(Answer::Report(w)) => {
                            let _ = w.send(Ok(()));
                        }
                        other => break unexpected("a report's answer", other),
                    },
                    Ok(ServerLine::Refused { code, message }) => match waiting.pop_front() {
                        Some(Answer::Beat(w)) => {
                            let _ = w.send(Err(refused(code, message)));
                        }
                        Some(Answer::Report(w)) => {
                            let _ = w.send(Err(refused(code, message)));
                        }
                        None => break unexpected("a refusal", None),
                    },
                    Ok(other) => {
                        break ChannelError::Protocol(format!("unexpected {other:?}"));
                    }
                    Err(e) => break e,
                },
                ask = asks.recv() => match ask {
                    Some((line, answer)) => {
                        if let Err(e) = writer.send(&line).await {
                            break e;
                        }
                        waiting.extend(answer);
                    }
                    None => break ChannelError::Unanswered,
                },
            }
        };
        self.asks().take();
        self.pushed().clear();
        self.state.send_modify(|s| s.open = false);
        why
    }
}

/// An answer that does not fit what waits for one.
fn unexpected(what: &str, waiting: Option<Answer>) -> ChannelError {
    let waited = match waiting {
        None => "nothing was asked",
        Some(Answer::Beat(_)) => "a heartbeat was asked",
        Some(Answer::Report(_)) => "a report was sent",
    };
    ChannelError::Protocol(format!("{what} came where {waited}"))
}

/// A refused heartbeat line as the request's refusal.
fn refused(code: ErrorCode, message: String) -> Error {
    let status = match code {
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::CONFLICT,
    };
    Error::Refused {
        status,
        text: message.clone(),
        error: Some(ErrorBody {
            code,
            message,
            hint: None,
        }),
    }
}
