//! What the agent samples for the server besides its reports, waiting to be sent on the
//! node channel (`stats` lines, version 3): each published claim's usage as its node
//! plugin last said it. Samples are replaced by newer ones and never go as a request:
//! one lost is made again at the next resync.

use std::collections::BTreeMap;
use std::sync::Mutex;

use std::sync::Arc;
use std::time::Duration;

use csivol_api::{CALL_BUCKETS, CallCounts, NodeStats, UsageSample};
use csivol_csi::convert::code_name;
use csivol_csi::endpoint::CallMeter;
use tokio::sync::Notify;

/// The most a `stats` line carries in samples, in JSON bytes: well inside the channel's
/// longest line, the rest left to the line's own fields.
const LINE_BUDGET: usize = 48 * 1024;

/// The samples waiting for the node channel, the newest per claim.
#[derive(Debug)]
pub struct Outbox {
    /// New at every start of the agent: the server tells a restart from a drop by it.
    start: String,
    usage: Mutex<BTreeMap<(String, String), UsageSample>>,
    /// Every CSI call the agent made since it started.
    pub calls: Arc<CallBook>,
    /// Woken when samples wait.
    pub wake: Notify,
}

impl Default for Outbox {
    fn default() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            start: format!("{}-{}", now.as_micros(), std::process::id()),
            usage: Mutex::default(),
            calls: Arc::default(),
            wake: Notify::new(),
        }
    }
}

impl Outbox {
    /// Keeps `sample` for the next `stats` line, in place of an older one of its claim.
    pub fn usage(&self, sample: UsageSample) {
        let key = (sample.volume.clone(), sample.alloc.clone());
        self.lock().insert(key, sample);
    }

    /// Says that the samples kept are ready to go.
    pub fn ready(&self) {
        self.wake.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), UsageSample>> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything waiting, as `stats` lines that each fit the channel, the first with the
    /// call counts; the samples are taken out of the outbox (the caller puts back what it
    /// could not send with [`Outbox::put_back`]).
    pub fn take(&self) -> Vec<NodeStats> {
        let samples = std::mem::take(&mut *self.lock());
        let mut lines = Vec::new();
        let mut line = self.line();
        line.calls = self.calls.counts();
        let mut bytes = line.calls.len() * 256;
        for sample in samples.into_values() {
            let size = serde_json::to_string(&sample).map_or(0, |s| s.len() + 1);
            if bytes + size > LINE_BUDGET && !line.usage.is_empty() {
                lines.push(std::mem::replace(&mut line, self.line()));
                bytes = 0;
            }
            bytes += size;
            line.usage.push(sample);
        }
        if !line.usage.is_empty() || !line.calls.is_empty() {
            lines.push(line);
        }
        lines
    }

    /// Samples not sent go back, unless a newer one of their claim came meanwhile.
    pub fn put_back(&self, lines: Vec<NodeStats>) {
        let mut kept = self.lock();
        for sample in lines.into_iter().flat_map(|l| l.usage) {
            kept.entry((sample.volume.clone(), sample.alloc.clone()))
                .or_insert(sample);
        }
    }

    /// Forgets the samples of claims no longer published (`published` holds the rest).
    pub fn retain(&self, published: &std::collections::HashSet<(String, String)>) {
        self.lock().retain(|k, _| published.contains(k));
    }

    fn line(&self) -> NodeStats {
        NodeStats {
            start: self.start.clone(),
            ..NodeStats::default()
        }
    }
}

/// Sends the outbox's samples on the node channel whenever they are ready and the channel
/// (version 3) is open; never returns. What cannot go waits for the next time.
pub async fn send(outbox: &Outbox, channel: &csivol_client::channel::Shared) {
    let mut state = channel.subscribe();
    loop {
        tokio::select! {
            () = outbox.wake.notified() => {}
            // Samples taken while the channel was closed go once it is open.
            Ok(()) = state.changed() => {}
        }
        if !state.borrow_and_update().v3 {
            continue;
        }
        let mut lines = outbox.take().into_iter();
        while let Some(line) = lines.next() {
            if !channel.stats(&line).await {
                outbox.put_back(std::iter::once(line).chain(lines).collect());
                break;
            }
        }
    }
}

/// Every CSI call the agent made since it started, by plugin, method and code: cumulative
/// counts, which the server reads against the agent's start id (a new id is a restart).
#[derive(Debug, Default)]
pub struct CallBook(Mutex<BTreeMap<(String, String, &'static str), CallCounts>>);

impl CallBook {
    pub fn record(&self, plugin: &str, method: &str, code: tonic::Code, took: Duration) {
        let code = code_name(code);
        let mut book = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let c = book
            .entry((plugin.to_owned(), method.to_owned(), code))
            .or_insert_with(|| CallCounts {
                plugin: plugin.to_owned(),
                method: method.to_owned(),
                code: code.to_owned(),
                buckets: vec![0; CALL_BUCKETS.len() + 1],
                ..CallCounts::default()
            });
        c.count += 1;
        c.micros += u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let secs = took.as_secs_f64();
        let bucket = CALL_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(CALL_BUCKETS.len());
        c.buckets[bucket] += 1;
    }

    pub fn counts(&self) -> Vec<CallCounts> {
        let book = self.0.lock().unwrap_or_else(|e| e.into_inner());
        book.values().cloned().collect()
    }
}

/// One plugin's calls, told to the agent's [`CallBook`].
#[derive(Debug)]
pub struct PluginMeter {
    pub plugin: String,
    pub book: Arc<CallBook>,
}

impl CallMeter for PluginMeter {
    fn record(&self, method: &str, code: tonic::Code, took: Duration) {
        self.book.record(&self.plugin, method, code, took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(volume: &str, used: u64) -> UsageSample {
        UsageSample {
            volume: volume.into(),
            alloc: "a".into(),
            plugin: "p".into(),
            usage: Some(csivol_api::VolumeUsage {
                bytes: Some(csivol_api::UsageNumbers {
                    used: Some(used),
                    available: None,
                    total: 100,
                }),
                inodes: None,
            }),
        }
    }

    #[test]
    fn many_samples_go_in_lines_that_fit_the_channel() {
        let out = Outbox::default();
        for i in 0..2000 {
            out.usage(sample(&format!("volume-{i:05}"), i));
        }
        let lines = out.take();
        assert!(lines.len() > 1, "{}", lines.len());
        assert_eq!(lines.iter().map(|l| l.usage.len()).sum::<usize>(), 2000);
        for l in &lines {
            let text = csivol_api::channel::AgentLine::Stats(Box::new(l.clone())).encode();
            assert!(
                text.len() <= csivol_api::channel::MAX_LINE_V2,
                "{}",
                text.len()
            );
        }
        assert!(out.take().is_empty(), "taken");
    }

    #[test]
    fn calls_are_counted_into_their_buckets() {
        let book = CallBook::default();
        let ms = Duration::from_millis;
        book.record("p", "NodePublishVolume", tonic::Code::Ok, ms(3));
        book.record("p", "NodePublishVolume", tonic::Code::Ok, ms(3));
        book.record(
            "p",
            "NodePublishVolume",
            tonic::Code::Ok,
            Duration::from_secs(60),
        );
        book.record("p", "NodePublishVolume", tonic::Code::NotFound, ms(1));
        let counts = book.counts();
        assert_eq!(counts.len(), 2, "{counts:?}");
        let ok = counts.iter().find(|c| c.code == "OK").unwrap();
        assert_eq!((ok.count, ok.micros), (3, 60_006_000));
        // 3 ms is in the 5 ms bucket; a minute past every bound.
        assert_eq!(ok.buckets[2], 2, "{ok:?}");
        assert_eq!(ok.buckets[CALL_BUCKETS.len()], 1, "{ok:?}");
        let out = Outbox::default();
        out.calls
            .record("p", "NodeGetVolumeStats", tonic::Code::Ok, ms(1));
        let lines = out.take();
        assert_eq!(lines.len(), 1, "calls go without samples too");
        assert_eq!(lines[0].calls.len(), 1);
    }

    #[test]
    fn a_newer_sample_wins_over_one_put_back() {
        let out = Outbox::default();
        out.usage(sample("v", 1));
        let lines = out.take();
        out.usage(sample("v", 2));
        out.put_back(lines);
        let lines = out.take();
        assert_eq!(lines[0].usage, [sample("v", 2)]);
    }
}
