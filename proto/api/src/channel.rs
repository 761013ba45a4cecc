//! The node channel: a node agent's cheap wait on the server, and in its second version the
//! agent's whole conversation with it. The agent opens `GET /v1/nodes/{node}/channel` with
//! `Connection: upgrade` and `Upgrade: csivol-channel/2, csivol-channel/1` (the versions it
//! speaks, best first; its node token, and its client certificate where configured, checked
//! as on its other endpoints); the server answers `101 Switching Protocols` with the one it
//! chose in `Upgrade`, and both sides then speak lines of text, each ended by `\n`:
//!
//! | from | line | meaning | version |
//! | --- | --- | --- | --- |
//! | server | `csivol-channel <version>` | first line: the protocol and the version chosen | 1 |
//! | server | `desired <index>` | the node's desired state is at `<index>`: fetch it (sent at once, then at a change the server does not push) | 1 |
//! | server | `changes <json>` | the node's desired state changed: a `DesiredState` holding the changes since the index the server pushed last (`changes.since`) | 2 |
//! | agent | `hb` | a heartbeat, the same as `POST /v1/nodes/{node}/heartbeat` | 1 |
//! | server | `hb <status> <ttl-ms>` | its answer: `ready`, `lost` or `fenced`, and the TTL | 1 |
//! | agent | `report <json>` | a `ReportBatch`, the same as `POST /v1/nodes/{node}/reports` | 2 |
//! | server | `reported <count>` | its answer: the batch of `<count>` reports was committed | 2 |
//! | server | `err <code> <message>` | a refused heartbeat or report (`not_found`: register again) | 1 |
//! | agent | `stats <json>` | a `NodeStats`: usage samples and call counts, kept in the server's memory; not answered | 3 |
//!
//! The server answers the agent's lines in the order they came. JSON is written on one
//! line (serde_json escapes line breaks inside strings). A line longer than the version's
//! longest ([`MAX_LINE`], [`MAX_LINE_V2`]), or one the reader does not know, ends the
//! channel; a sender with more to say than fits uses the request instead (the server
//! sends `desired <index>` in place of changes too large, the agent posts a report batch
//! too large). A channel that closes is not a missed heartbeat: the TTL alone decides.

use crate::{DesiredState, ErrorCode, HeartbeatResponse, NodeStats, NodeStatus, ReportBatch};

/// The `Upgrade` token of the channel's version 1.
pub const UPGRADE: &str = "csivol-channel/1";
/// The `Upgrade` token of the channel's version 2.
pub const UPGRADE_V2: &str = "csivol-channel/2";
/// The `Upgrade` token of the channel's version 3.
pub const UPGRADE_V3: &str = "csivol-channel/3";
/// The server's first line in version 1.
pub const HELLO: &str = "csivol-channel 1";
/// The server's first line in version 2.
pub const HELLO_V2: &str = "csivol-channel 2";
/// The server's first line in version 3.
pub const HELLO_V3: &str = "csivol-channel 3";
/// The longest line either side sends in version 1, `\n` included; an `err` message is cut
/// to fit (in both versions).
pub const MAX_LINE: usize = 160;
/// The longest line either side sends in version 2, `\n` included: a few volumes' desired
/// entries, or a batch of reports.
pub const MAX_LINE_V2: usize = 64 * 1024;

/// The versions of the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// Heartbeats, and the desired index pushed.
    V1,
    /// Also the desired changes pushed, and reports.
    V2,
    /// Also the agent's stats (usage samples, call counts), which the server does not answer.
    V3,
}

impl Version {
    /// Its `Upgrade` token.
    pub fn upgrade(self) -> &'static str {
        match self {
            Self::V1 => UPGRADE,
            Self::V2 => UPGRADE_V2,
            Self::V3 => UPGRADE_V3,
        }
    }

    /// Its longest line, `\n` included.
    pub fn max_line(self) -> usize {
        match self {
            Self::V1 => MAX_LINE,
            Self::V2 | Self::V3 => MAX_LINE_V2,
        }
    }

    /// The best version an `Upgrade` header's tokens name, if any.
    pub fn chosen<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        tokens
            .into_iter()
            .filter_map(|t| match t.trim() {
                t if t.eq_ignore_ascii_case(UPGRADE_V3) => Some(Self::V3),
                t if t.eq_ignore_ascii_case(UPGRADE_V2) => Some(Self::V2),
                t if t.eq_ignore_ascii_case(UPGRADE) => Some(Self::V1),
                _ => None,
            })
            .max()
    }
}

/// What the server sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerLine {
    Hello(Version),
    Desired(u64),
    Changes(Box<DesiredState>),
    Beat(HeartbeatResponse),
    Reported(u64),
    Refused { code: ErrorCode, message: String },
}

/// What the agent sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentLine {
    Beat,
    Report(ReportBatch),
    Stats(Box<NodeStats>),
}

impl ServerLine {
    /// The line, `\n` included. Only an `err` line is cut to fit [`MAX_LINE`]; the sender
    /// of a `changes` line checks its length against the channel's version.
    pub fn encode(&self) -> String {
        let mut line = match self {
            Self::Hello(Version::V1) => HELLO.to_owned(),
            Self::Hello(Version::V2) => HELLO_V2.to_owned(),
            Self::Hello(Version::V3) => HELLO_V3.to_owned(),
            Self::Desired(index) => format!("desired {index}"),
            Self::Changes(state) => {
                let json = serde_json::to_string(state).expect("a desired state serializes");
                format!("changes {json}")
            }
            Self::Beat(hb) => format!("hb {} {}", hb.status.as_str(), hb.heartbeat_ttl_ms),
            Self::Reported(count) => format!("reported {count}"),
            Self::Refused { code, message } => {
                // One line: the message's own line breaks (hints) become spaces.
                let message: String = message
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect();
                let mut line = format!("err {} {message}", code.as_str());
                if line.len() > MAX_LINE - 1 {
                    let mut end = MAX_LINE - 1;
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    line.truncate(end);
                }
                line
            }
        };
        line.push('\n');
        line
    }

    /// A line without its `\n`.
    pub fn parse(line: &str) -> Result<Self, String> {
        let unknown = || {
            let shown: String = line.chars().take(80).collect();
            format!("unknown channel line `{shown}`")
        };
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            _ if line == HELLO => Ok(Self::Hello(Version::V1)),
            _ if line == HELLO_V2 => Ok(Self::Hello(Version::V2)),
            _ if line == HELLO_V3 => Ok(Self::Hello(Version::V3)),
            "desired" => rest.parse().map(Self::Desired).map_err(|_| unknown()),
            "changes" => serde_json::from_str::<DesiredState>(rest)
                .ok()
                .filter(|s| s.changes.is_some())
                .map(|s| Self::Changes(Box::new(s)))
                .ok_or_else(unknown),
            "reported" => rest.parse().map(Self::Reported).map_err(|_| unknown()),
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

/// The most buffer [`Lines`] keeps between lines.
const KEPT: usize = 16 * 1024;

/// Lines as they arrive in pieces, gathered in a buffer that grows as far as the longest
/// line allowed: the reader reads into [`Lines::space`], says how much with
/// [`Lines::filled`] and takes the complete lines with [`Lines::next_line`]. Reading into
/// it is cancel-safe: what arrived stays here until taken.
#[derive(Debug)]
pub struct Lines {
    buf: Vec<u8>,
    len: usize,
    max: usize,
}

impl Default for Lines {
    /// For version 1's lines, and a version 2 server's first line.
    fn default() -> Self {
        Self::new(MAX_LINE)
    }
}

impl Lines {
    /// Lines of at most `max` bytes, `\n` included.
    pub fn new(max: usize) -> Self {
        Self {
            buf: vec![0; MAX_LINE.min(max)],
            len: 0,
            max,
        }
    }

    /// Allows lines of up to `max` bytes from now on (once the version is known).
    pub fn allow(&mut self, max: usize) {
        self.max = max.max(self.len);
    }

    /// Where the next read goes: never empty while a line can still grow.
    pub fn space(&mut self) -> &mut [u8] {
        if self.len == self.buf.len() && self.buf.len() < self.max {
            let grown = (self.buf.len() * 4).clamp(MAX_LINE, self.max);
            self.buf.resize(grown, 0);
        }
        &mut self.buf[self.len..]
    }

    /// `n` bytes were read into [`Lines::space`].
    pub fn filled(&mut self, n: usize) {
        self.len = (self.len + n).min(self.buf.len());
    }

    /// The next complete line, without its `\n`; an error for a line longer than the
    /// longest allowed or not UTF-8 (the channel ends then).
    pub fn next_line(&mut self) -> Option<Result<String, String>> {
        let Some(end) = self.buf[..self.len].iter().position(|b| *b == b'\n') else {
            if self.len < self.max {
                return None;
            }
            // Said once; what was gathered is dropped (the channel ends on it anyway).
            self.len = 0;
            return Some(Err(format!(
                "a channel line longer than {} bytes",
                self.max
            )));
        };
        let line = std::str::from_utf8(&self.buf[..end])
            .map(str::to_owned)
            .map_err(|_| "a channel line that is not UTF-8".to_owned());
        self.buf.copy_within(end + 1..self.len, 0);
        self.len -= end + 1;
        if self.len == 0 && self.buf.len() > KEPT {
            // A rare long line does not keep its buffer.
            self.buf.truncate(MAX_LINE);
            self.buf.shrink_to_fit();
        }
        Some(line)
    }
}

impl AgentLine {
    /// The line, `\n` included; the sender checks a `report` line's length against the
    /// channel's version.
    pub fn encode(&self) -> String {
        match self {
            Self::Beat => "hb\n".to_owned(),
            Self::Report(batch) => {
                let json = serde_json::to_string(batch).expect("a report batch serializes");
                format!("report {json}\n")
            }
            Self::Stats(stats) => {
                let json = serde_json::to_string(stats).expect("stats serialize");
                format!("stats {json}\n")
            }
        }
    }

    /// A line without its `\n`, in a channel of `version`.
    pub fn parse(line: &str, version: Version) -> Result<Self, String> {
        match line.split_once(' ') {
            None if line == "hb" => Ok(Self::Beat),
            Some(("report", json)) if version >= Version::V2 => serde_json::from_str(json)
                .map(Self::Report)
                .map_err(|e| format!("a report line that is not a report batch: {e}")),
            Some(("stats", json)) if version >= Version::V3 => serde_json::from_str(json)
                .map(|s| Self::Stats(Box::new(s)))
                .map_err(|e| format!("a stats line that is not the node's stats: {e}")),
            _ => {
                let shown: String = line.chars().take(80).collect();
                Err(format!("unknown channel line `{shown}`"))
            }
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
            (ServerLine::Hello(Version::V1), "csivol-channel 1\n"),
            (ServerLine::Hello(Version::V2), "csivol-channel 2\n"),
            (ServerLine::Reported(3), "reported 3\n"),
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
            "csivol-channel 4",
            "desired",
            "desired -1",
            "desired x",
            "hb",
            "hb ready",
            "hb maybe 10",
            "hb ready ten",
            "err nonsense message",
            "ping",
            "reported",
            "reported -2",
            "changes",
            "changes {}",
            // A whole state is fetched by request, never pushed.
            r#"changes {"index":3,"status":null,"publish":[],"unpublish":[],"unstage":[],"controller_ops":[]}"#,
        ] {
            assert!(ServerLine::parse(text).is_err(), "{text:?}");
        }
        for version in [Version::V1, Version::V2] {
            assert_eq!(AgentLine::parse("hb", version), Ok(AgentLine::Beat));
            for text in ["", "hb ", "HB", "hb 1", "report", "report {", "report []"] {
                assert!(AgentLine::parse(text, version).is_err(), "{text:?}");
            }
        }
        assert_eq!(AgentLine::Beat.encode(), "hb\n");
        assert!(
            AgentLine::parse(r#"report {"reports":[]}"#, Version::V1).is_err(),
            "version 1 has no reports"
        );
        assert!(
            AgentLine::parse(r#"stats {"start":"s"}"#, Version::V2).is_err(),
            "version 2 has no stats"
        );
    }

    fn changes() -> DesiredState {
        DesiredState {
            index: 12,
            status: Some(NodeStatus::Ready),
            publish: vec![],
            unpublish: vec![crate::DesiredUnpublish {
                volume: "db\nwith a line break".into(),
                alloc: "a1".into(),
                plugin: "p".into(),
                external_id: "e".into(),
            }],
            unstage: vec![],
            controller_ops: vec![],
            expand: vec![],
            keep_staged: vec![],
            refresh_limits: 0,
            changes: Some(crate::DesiredChanges {
                since: 9,
                volumes: vec!["db\nwith a line break".into()],
            }),
            generation: Some("00000000000000ab".into()),
            register_again: false,
            capacity: vec![],
        }
    }

    #[test]
    fn version_2_lines_carry_changes_and_reports_on_one_line() {
        let pushed = ServerLine::Changes(Box::new(changes()));
        let text = pushed.encode();
        assert!(
            text.starts_with("changes {") && text.ends_with("}\n"),
            "{text}"
        );
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert_eq!(ServerLine::parse(text.trim_end_matches('\n')), Ok(pushed));

        let report = AgentLine::Report(ReportBatch {
            reports: vec![crate::Report::Unstaged {
                volume: "v\n2".into(),
            }],
        });
        let text = report.encode();
        assert!(
            text.starts_with("report {") && text.ends_with("}\n"),
            "{text}"
        );
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert_eq!(
            AgentLine::parse(text.trim_end_matches('\n'), Version::V2),
            Ok(report)
        );
    }

    #[test]
    fn version_3_lines_carry_the_nodes_stats() {
        let stats = AgentLine::Stats(Box::new(NodeStats {
            start: "s1".into(),
            usage: vec![crate::UsageSample {
                volume: "v\n1".into(),
                alloc: "a".into(),
                plugin: "p".into(),
                usage: Some(crate::VolumeUsage {
                    bytes: Some(crate::UsageNumbers {
                        used: Some(1),
                        available: None,
                        total: 10,
                    }),
                    inodes: None,
                }),
            }],
            calls: vec![],
        }));
        let text = stats.encode();
        assert!(
            text.starts_with("stats {") && text.ends_with("}\n"),
            "{text}"
        );
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert_eq!(
            AgentLine::parse(text.trim_end_matches('\n'), Version::V3),
            Ok(stats)
        );
        assert_eq!(
            ServerLine::parse(HELLO_V3),
            Ok(ServerLine::Hello(Version::V3))
        );
    }

    #[test]
    fn the_best_version_offered_is_chosen() {
        let chosen = |h: &str| Version::chosen(h.split(','));
        assert_eq!(
            chosen("csivol-channel/2, csivol-channel/1"),
            Some(Version::V2)
        );
        assert_eq!(
            chosen("csivol-channel/1,csivol-channel/2"),
            Some(Version::V2)
        );
        assert_eq!(chosen("csivol-channel/1"), Some(Version::V1));
        assert_eq!(chosen("websocket, CSIVOL-CHANNEL/2"), Some(Version::V2));
        assert_eq!(
            chosen("csivol-channel/3, csivol-channel/2"),
            Some(Version::V3)
        );
        assert_eq!(chosen("csivol-channel/4, websocket"), None);
        assert_eq!(chosen(""), None);
    }

    #[test]
    fn version_2_lines_grow_the_buffer_up_to_their_limit() {
        let mut lines = Lines::default();
        let feed = |lines: &mut Lines, mut bytes: &[u8]| {
            let mut got = Vec::new();
            while !bytes.is_empty() {
                let space = lines.space();
                let n = space.len().min(bytes.len()).min(1000);
                assert!(n > 0, "no space while a line can grow");
                space[..n].copy_from_slice(&bytes[..n]);
                lines.filled(n);
                bytes = &bytes[n..];
                got.extend(std::iter::from_fn(|| lines.next_line()));
            }
            got
        };
        assert_eq!(
            feed(&mut lines, b"csivol-channel 2\n"),
            [Ok(HELLO_V2.into())]
        );
        lines.allow(MAX_LINE_V2);
        let long = format!("changes {}", "x".repeat(20_000));
        let got = feed(&mut lines, format!("{long}\nhb ready 1\n").as_bytes());
        assert_eq!(got, [Ok(long), Ok("hb ready 1".into())]);
        let too_long = feed(&mut lines, &vec![b'y'; MAX_LINE_V2]);
        assert!(too_long.len() == 1 && too_long[0].is_err(), "{too_long:?}");
        assert_eq!(feed(&mut lines, b"hb\n"), [Ok("hb".into())]);
    }
}
