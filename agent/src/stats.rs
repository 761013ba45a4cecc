//! What the agent samples for the server besides its reports, waiting to be sent on the
//! node channel (`stats` lines, version 3): each published claim's usage as its node
//! plugin last said it. Samples are replaced by newer ones and never go as a request:
//! one lost is made again at the next resync.

use std::collections::BTreeMap;
use std::sync::Mutex;

use csivol_api::{NodeStats, UsageSample};
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

    /// Everything waiting, as `stats` lines that each fit the channel; taken out of the
    /// outbox (the caller puts back what it could not send with [`Outbox::put_back`]).
    pub fn take(&self) -> Vec<NodeStats> {
        let samples = std::mem::take(&mut *self.lock());
        let mut lines = Vec::new();
        let mut line = self.line();
        let mut bytes = 0;
        for sample in samples.into_values() {
            let size = serde_json::to_string(&sample).map_or(0, |s| s.len() + 1);
            if bytes + size > LINE_BUDGET && !line.usage.is_empty() {
                lines.push(std::mem::replace(&mut line, self.line()));
                bytes = 0;
            }
            bytes += size;
            line.usage.push(sample);
        }
        if !line.usage.is_empty() {
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
