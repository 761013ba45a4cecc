//! The client end of a node's channel (the protocol is [`csivol_api::channel`]), opened by
//! [`crate::Client::channel`]: the upgraded connection, split so that one task can read
//! the server's lines while another writes heartbeats, and [`Shared`], which the node
//! agent and the benchmark's simulated nodes use alike.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use csivol_api::channel::{AgentLine, HELLO, Lines, ServerLine};
use csivol_api::{ErrorBody, ErrorCode, HeartbeatResponse};
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
    #[error("a heartbeat on the channel went unanswered")]
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
}

/// The writing end: heartbeats.
#[derive(Debug)]
pub struct Writer {
    io: WriteHalf<reqwest::Upgraded>,
}

impl Channel {
    pub(crate) fn new(io: reqwest::Upgraded) -> Self {
        Self { io }
    }

    /// Reads the server's first line, which must name this protocol and version, and
    /// splits the channel.
    pub async fn start(self) -> Result<(Reader, Writer), ChannelError> {
        let (io, writer) = tokio::io::split(self.io);
        let mut reader = Reader {
            io,
            lines: Lines::default(),
        };
        match reader.recv().await? {
            ServerLine::Hello => Ok((reader, Writer { io: writer })),
            other => Err(ChannelError::Protocol(format!(
                "expected `{HELLO}` first, got {other:?}"
            ))),
        }
    }
}

impl Reader {
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
    pub async fn send(&mut self, line: AgentLine) -> Result<(), ChannelError> {
        self.io.write_all(line.encode().as_bytes()).await?;
        self.io.flush().await?;
        Ok(())
    }
}

/// A heartbeat asked of the open channel, and where its answer goes.
type BeatRequest = oneshot::Sender<Result<HeartbeatResponse, Error>>;

/// What a caller's loops see of the channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Open, and the server said at which index the node's desired state is.
    pub open: bool,
    /// The index the server last pushed.
    pub pushed: u64,
}

/// A node's channel as its loops share it: [`Shared::serve`] runs an open channel, the
/// heartbeat loop sends through [`Shared::heartbeat`], the desired-state loop watches
/// [`Shared::subscribe`].
#[derive(Debug)]
pub struct Shared {
    beats: Mutex<Option<mpsc::Sender<BeatRequest>>>,
    state: watch::Sender<State>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            beats: Mutex::new(None),
            state: watch::channel(State::default()).0,
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

    fn beats(&self) -> std::sync::MutexGuard<'_, Option<mpsc::Sender<BeatRequest>>> {
        self.beats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A heartbeat over the open channel, answered as `POST .../heartbeat` would be (a
    /// refusal is [`Error::Refused`] with the API's error code). `None` when the channel is
    /// not open, or closed before it answered: send the heartbeat as a request instead. A
    /// channel that does not answer within `within` is closed.
    pub async fn heartbeat(&self, within: Duration) -> Option<Result<HeartbeatResponse, Error>> {
        let beats = self.beats().clone()?;
        let (tx, rx) = oneshot::channel();
        beats.send(tx).await.ok()?;
        match tokio::time::timeout(within, rx).await {
            Ok(answer) => answer.ok(),
            Err(_) => {
                // Every sender dropped ends the channel (`serve` returns).
                self.beats().take();
                None
            }
        }
    }

    /// Runs an open channel until it ends, and says why: the server closed or broke it,
    /// or a heartbeat went unanswered.
    pub async fn serve(&self, mut reader: Reader, mut writer: Writer) -> ChannelError {
        let (tx, mut requests) = mpsc::channel::<BeatRequest>(1);
        *self.beats() = Some(tx);
        // Heartbeats sent, waiting for their answers, which come in order.
        let mut waiting: VecDeque<BeatRequest> = VecDeque::new();
        let why = loop {
            tokio::select! {
                line = reader.recv() => match line {
                    Ok(ServerLine::Desired(index)) => self.state.send_modify(|s| {
                        s.open = true;
                        s.pushed = index;
                    }),
                    Ok(ServerLine::Beat(hb)) => {
                        if let Some(w) = waiting.pop_front() {
                            let _ = w.send(Ok(hb));
                        }
                    }
                    Ok(ServerLine::Refused { code, message }) => {
                        if let Some(w) = waiting.pop_front() {
                            let _ = w.send(Err(refused(code, message)));
                        }
                    }
                    Ok(ServerLine::Hello) => {
                        break ChannelError::Protocol("a second hello".into());
                    }
                    Err(e) => break e,
                },
                request = requests.recv() => match request {
                    Some(answer) => {
                        if let Err(e) = writer.send(AgentLine::Beat).await {
                            break e;
                        }
                        waiting.push_back(answer);
                    }
                    None => break ChannelError::Unanswered,
                },
            }
        };
        self.beats().take();
        self.state.send_modify(|s| s.open = false);
        why
    }
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
