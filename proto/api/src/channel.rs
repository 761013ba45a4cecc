//! The node channel: a node agent's cheap wait on the server. The agent opens
//! `GET /v1/nodes/{node}/channel` with `Connection: upgrade` and `Upgrade: csivol-channel/1`
//! (its node token, and its client certificate where configured, checked as on its other
//! endpoints); the server answers `101 Switching Protocols` and both sides then speak
//! short lines of ASCII text, each ended by `\n`:
//!
//! | from | line | meaning |
//! | --- | --- | --- |
//! | server | `csivol-channel 1` | first line: the protocol and its version |
//! | server | `desired <index>` | the node's desired state is at `<index>` (sent at once, then at every change) |
//! | agent | `hb` | a heartbeat, the same as `POST /v1/nodes/{node}/heartbeat` |
//! | server | `hb <status> <ttl-ms>` | its answer: `ready`, `lost` or `fenced`, and the TTL |
//! | server | `err <code> <message>` | a refused heartbeat (`not_found`: register again) |
//!
//! A line longer than [`MAX_LINE`] bytes, or one the reader does not know, ends the
//! channel. A channel that closes is not a missed heartbeat: the TTL alone decides.

use crate::{ErrorCode, HeartbeatResponse, NodeStatus};

/// The `Upgrade` token of the channel's version 1.
pub const UPGRADE: &str = "csivol-channel/1";
/// The server's first line.
pub const HELLO: &str = "csivol-channel 1";
/// The longest line either side sends, `\n` included; an `err` message is cut to fit.
pub const MAX_LINE: usize = 160;

/// What the server sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerLine {
    Hello,
    Desired(u64),
    Beat(HeartbeatResponse),
    Refused { code: ErrorCode, message: String },
}

/// What the agent sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentLine {
    Beat,
}

impl ServerLine {
    /// The line, `\n` included, at most [`MAX_LINE`] bytes.
    pub fn encode(&self) -> String {
        let mut line = match self {
            Self::Hello => HELLO.to_owned(),
            Self::Desired(index) => format!("desired {index}"),
            Self::Beat(hb) => format!("hb {} {}", hb.status.as_str(), hb.heartbeat_ttl_ms),
            Self::Refused { code, message } => {
                // One line: the message's own line breaks (hints) become spaces.
                let message: String = message
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect();
                format!("err {} {message}", code.as_str())
            }
        };
        if line.len() > MAX_LINE - 1 {
            let mut end = MAX_LINE - 1;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        line.push('\n');
        line
    }

    /// A line without its `\n`.
    pub fn parse(line: &str) -> Result<Self, String> {
        let unknown = || format!("unknown channel line `{line}`");
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            _ if line == HELLO => Ok(Self::Hello),
            "desired" => rest.parse().map(Self::Desired).map_err(|_| unknown()),
            "hb" => {
                let (status, ttl) = rest.split_once(' ').ok_or_else(unknown)?;
                Ok(Self::Beat(HeartbeatResponse {
                    status: status.parse::<NodeStatus>()?,
                    heartbeat_ttl_ms: ttl.parse().map_err(|_| unknown())?,
                }))
            }
            "err" => {
                let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
                let code = serde_json::from_value(serde_json::Value::String(code.to_owned()))
                    .map_err(|_| unknown())?;
                Ok(Self::Refused {
                    code,
                    message: message.to_owned(),
                })
            }
            _ => Err(unknown()),
        }
    }
}

/// Lines as they arrive in pieces, gathered in a fixed buffer of [`MAX_LINE`] bytes: the
/// reader reads into [`Lines::space`], says how much with [`Lines::filled`] and takes the
/// complete lines with [`Lines::next_line`]. Reading into it is cancel-safe: what arrived
/// stays here until taken.
#[derive(Debug)]
pub struct Lines {
    buf: [u8; MAX_LINE],
    len: usize,
}

impl Default for Lines {
    fn default() -> Self {
        Self {
            buf: [0; MAX_LINE],
            len: 0,
        }
    }
}

impl Lines {
    /// Where the next read goes.
    pub fn space(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// `n` bytes were read into [`Lines::space`].
    pub fn filled(&mut self, n: usize) {
        self.len = (self.len + n).min(MAX_LINE);
    }

    /// The next complete line, without its `\n`; an error for a line longer than
    /// [`MAX_LINE`] or not UTF-8 (the channel ends then).
    pub fn next_line(&mut self) -> Option<Result<String, String>> {
        let Some(end) = self.buf[..self.len].iter().position(|b| *b == b'\n') else {
            if self.len < MAX_LINE {
                return None;
            }
            // Said once; what was gathered is dropped (the channel ends on it anyway).
            self.len = 0;
            return Some(Err(format!("a channel line longer than {MAX_LINE} bytes")));
        };
        let line = std::str::from_utf8(&self.buf[..end])
            .map(str::to_owned)
            .map_err(|_| "a channel line that is not UTF-8".to_owned());
        self.buf.copy_within(end + 1..self.len, 0);
        self.len -= end + 1;
        Some(line)
    }
}

impl AgentLine {
    pub fn encode(self) -> &'static str {
        match self {
            Self::Beat => "hb\n",
        }
    }

    /// A line without its `\n`.
    pub fn parse(line: &str) -> Result<Self, String> {
        match line {
            "hb" => Ok(Self::Beat),
            _ => Err(format!("unknown channel line `{line}`")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lines_read_back_as_written() {
        let beat = |status, ttl| {
            ServerLine::Beat(HeartbeatResponse {
                status,
                heartbeat_ttl_ms: ttl,
            })
        };
        let refused = |code, message: &str| ServerLine::Refused {
            code,
            message: message.into(),
        };
        for (line, text) in [
            (ServerLine::Hello, "csivol-channel 1\n"),
            (ServerLine::Desired(42), "desired 42\n"),
            (beat(NodeStatus::Ready, 30_000), "hb ready 30000\n"),
            (beat(NodeStatus::Lost, 900), "hb lost 900\n"),
            (beat(NodeStatus::Fenced, 1), "hb fenced 1\n"),
            (
                refused(ErrorCode::NotFound, "node `n` is not registered"),
                "err not_found node `n` is not registered\n",
            ),
            (refused(ErrorCode::Unauthorized, ""), "err unauthorized \n"),
        ] {
            assert_eq!(line.encode(), text);
            assert_eq!(ServerLine::parse(text.trim_end_matches('\n')), Ok(line));
        }
    }

    #[test]
    fn long_or_multi_line_messages_fit_one_line() {
        let line = ServerLine::Refused {
            code: ErrorCode::Unauthorized,
            message: format!("token t was revoked\nhint: {}", "é".repeat(200)),
        }
        .encode();
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with('\n'));
        assert!(line.starts_with("err unauthorized token t was revoked hint: é"));
    }

    #[test]
    fn lines_are_gathered_from_pieces() {
        let mut lines = Lines::default();
        let mut feed = |bytes: &[u8]| {
            lines.space()[..bytes.len()].copy_from_slice(bytes);
            lines.filled(bytes.len());
            std::iter::from_fn(|| lines.next_line()).collect::<Vec<_>>()
        };
        assert_eq!(feed(b"desi"), []);
        assert_eq!(feed(b"red 4\nhb re"), [Ok("desired 4".to_owned())]);
        assert_eq!(
            feed(b"ady 30\n\nhb\n"),
            [
                Ok("hb ready 30".to_owned()),
                Ok(String::new()),
                Ok("hb".to_owned())
            ]
        );
        assert_eq!(feed(&[0xff, b'\n']).len(), 1);
        let too_long = feed(&[b'x'; MAX_LINE]);
        assert!(too_long.len() == 1 && too_long[0].is_err(), "{too_long:?}");
        assert_eq!(
            feed(b"hb\n"),
            [Ok("hb".to_owned())],
            "and then starts afresh"
        );
    }

    #[test]
    fn unknown_lines_are_refused() {
        for text in [
            "",
            "csivol-channel 2",
            "desired",
            "desired -1",
            "desired x",
            "hb",
            "hb ready",
            "hb maybe 10",
            "hb ready ten",
            "err nonsense message",
            "ping",
        ] {
            assert!(ServerLine::parse(text).is_err(), "{text:?}");
        }
        assert_eq!(AgentLine::parse("hb"), Ok(AgentLine::Beat));
        assert_eq!(AgentLine::Beat.encode(), "hb\n");
        for text in ["", "hb ", "HB", "hb 1"] {
            assert!(AgentLine::parse(text).is_err(), "{text:?}");
        }
    }
}
