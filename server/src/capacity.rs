//! The plugins' GetCapacity answers as controller hosts report them, kept in this server's
//! memory: a sample is a passing figure of the storage, not cluster state. Writing each one
//! to the state store would mean a write per plugin, segment and parameter set every
//! listing interval, replicated through etcd; a restart or a restore loses or keeps
//! nothing that matters, because the hosts sample again within their interval and after
//! each CreateVolume and DeleteVolume. With several servers each knows the samples of the
//! hosts that report to it; a server without a fresh sample lets a creation go to the
//! plugin, as GetCapacity is advisory anyway.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use csivol_api::{
    CapacityQuery, CapacitySample, CapacityShown, CreateVolumeSpec, Topology, format_size,
};
use csivol_rules::capacity::{Known, Limit, Verdict, Wanted, judge, order_preferred};

use crate::error::{ApiError, ApiResult};

/// How long a sample is acted on: five of the agents' default listing intervals, so that
/// a host that missed a round or two still counts, and a host gone quiet soon does not.
pub const FRESH_FOR: Duration = Duration::from_secs(300);

/// Samples kept per plugin: a new one beyond this replaces the oldest.
const PER_PLUGIN: usize = 4096;

#[derive(Debug, Default)]
pub struct Capacity {
    samples: Mutex<HashMap<String, HashMap<CapacityQuery, Held>>>,
}

#[derive(Debug)]
struct Held {
    sample: CapacitySample,
    /// When this server heard it, by its clock.
    at_ms: i64,
}

impl Capacity {
    /// Keeps `samples` of `plugin`, heard at `now_ms`, each replacing the one of its query.
    pub fn record(&self, plugin: &str, samples: Vec<CapacitySample>, now_ms: i64) {
        let mut all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let held = all.entry(plugin.to_owned()).or_default();
        for sample in samples {
            if held.len() >= PER_PLUGIN && !held.contains_key(&sample.query) {
                let oldest = held
                    .iter()
                    .min_by_key(|(_, h)| h.at_ms)
                    .map(|(q, _)| q.clone());
                if let Some(q) = oldest {
                    held.remove(&q);
                }
            }
            held.insert(
                sample.query.clone(),
                Held {
                    sample,
                    at_ms: now_ms,
                },
            );
        }
    }

    /// `plugin`'s samples with their age at `now_ms`, by segment then parameters.
    pub fn shown(&self, plugin: &str, now_ms: i64) -> Vec<CapacityShown> {
        let all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<CapacityShown> = all
            .get(plugin)
            .into_iter()
            .flatten()
            .map(|(_, h)| {
                // The clock may have gone back since: a sample is then as new as can be.
                let age_ms = u64::try_from(now_ms - h.at_ms).unwrap_or(0);
                CapacityShown {
                    sample: h.sample.clone(),
                    age_ms,
                    fresh: age_ms <= FRESH_FOR.as_millis() as u64,
                }
            })
            .collect();
        out.sort_by(|a, b| a.sample.query.cmp(&b.sample.query));
        out
    }
}

impl Capacity {
    /// A creation of `spec` judged by the fresh samples of its plugin
    /// (`csivol_rules::capacity`): refused when they say it cannot fit, otherwise given
    /// back with its preferred segments ordered by free capacity where known. `job_node`:
    /// the node a per-job volume is made for, whose segment the server chose, so that the
    /// hint names another node rather than a topology to write in a spec.
    pub fn fit(
        &self,
        volume: &str,
        mut spec: CreateVolumeSpec,
        now_ms: i64,
        job_node: Option<&str>,
    ) -> ApiResult<CreateVolumeSpec> {
        let shown = self.shown(&spec.plugin, now_ms);
        let known: Vec<Known<'_>> = shown
            .iter()
            .map(|s| Known {
                sample: &s.sample,
                fresh: s.fresh,
            })
            .collect();
        let required = spec
            .topology_request
            .as_ref()
            .map(|t| t.required.clone())
            .unwrap_or_default();
        let verdict = judge(
            &Wanted {
                required_bytes: spec.capacity_bytes,
                parameters: &spec.parameters,
                required: &required,
            },
            &known,
        );
        if let Verdict::TooBig {
            segment,
            limit,
            bytes,
            fits,
        } = verdict
        {
            let age = shown
                .iter()
                .find(|s| {
                    s.sample.query.segment == segment
                        && s.sample.query.parameters == spec.parameters
                })
                .map_or(0, |s| s.age_ms / 1000);
            let what = match limit {
                Limit::MaximumVolumeSize => "a maximum volume size",
                Limit::Available => "an available capacity",
            };
            let place = if segment.is_empty() {
                String::new()
            } else {
                format!(" in segment {}", pairs(&segment))
            };
            let e = ApiError::conflict(format!(
                "volume `{volume}` does not fit: plugin `{}` reports {what} of {bytes} bytes ({}){place}, {} bytes ({}) asked for (GetCapacity, {age}s ago)",
                spec.plugin,
                format_size(bytes),
                spec.capacity_bytes,
                format_size(spec.capacity_bytes),
            ));
            return Err(match (fits, job_node) {
                (Some(s), Some(node)) => e.with_hint(format!(
                    "segment {} has room: claim it on a node there rather than on `{node}`",
                    pairs(&s)
                )),
                (None, Some(_)) => e.with_hint(format!(
                    "no sampled segment has room for it; free space in the storage, or make \
                     the job's volume at most {}",
                    format_size(bytes)
                )),
                (Some(s), None) => e.with_hint(format!(
                    "segment {} has room: name it in `topology_request.required`, or ask for at most {}",
                    pairs(&s),
                    format_size(bytes)
                )),
                (None, None) => e.with_hint(format!(
                    "no sampled segment has room; ask for at most {} (`capacity_bytes`), or free space in the storage",
                    format_size(bytes)
                )),
            });
        }
        if let Some(t) = spec.topology_request.as_mut() {
            order_preferred(&mut t.preferred, &spec.parameters, &known);
        }
        Ok(spec)
    }
}

/// `zone=a, rack=1`.
fn pairs(t: &Topology) -> String {
    t.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
