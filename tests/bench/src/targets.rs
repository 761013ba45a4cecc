//! csivol's targets, each compared with a run's figure and given as a ratio to it.

use serde::Serialize;

use super::report::Report;

/// One of csivol's targets, against this run's figure.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub target: String,
    /// `at most` or `at least`.
    pub bound: &'static str,
    pub limit: f64,
    pub unit: &'static str,
    /// This run's figure; null where the run does not measure it (another mode, too few
    /// nodes, volumes or claims for the target's statement).
    pub value: Option<f64>,
    /// `value / limit`: above 1 misses an `at most` target, below 1 an `at least` one.
    pub ratio: Option<f64>,
    pub met: Option<bool>,
}

impl Target {
    fn at_most(target: &str, value: Option<f64>, limit: f64, unit: &'static str) -> Self {
        Self::new(
            target,
            "at most",
            value,
            limit,
            unit,
            value.map(|v| v <= limit),
        )
    }

    fn at_least(target: &str, value: Option<f64>, limit: f64, unit: &'static str) -> Self {
        Self::new(
            target,
            "at least",
            value,
            limit,
            unit,
            value.map(|v| v >= limit),
        )
    }

    fn new(
        target: &str,
        bound: &'static str,
        value: Option<f64>,
        limit: f64,
        unit: &'static str,
        met: Option<bool>,
    ) -> Self {
        Self {
            target: target.to_owned(),
            bound,
            limit,
            unit,
            value,
            ratio: value.map(|v| v / limit),
            met,
        }
    }

    pub fn text(&self) -> String {
        let figure = |v: f64| format!("{v:.2}{}", self.unit);
        format!(
            "  {:<7} {}: {} {}; this run {}",
            match self.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "n/a",
            },
            self.target,
            self.bound,
            figure(self.limit),
            match (self.value, self.ratio) {
                (Some(v), Some(r)) => format!("{} = {r:.2}× the target", figure(v)),
                _ => "not measured".to_owned(),
            },
        )
    }
}

/// csivol's targets for the run's mode, on a 2-core machine. Each is stated for one shape of
/// run: throughput and CPU per cycle for many clients (full: 10 nodes, 32 clients, `--mount
/// none`; server: 1,000 nodes), latency over the floor for one client (`--concurrency 1`),
/// memory for the inventory it names. A run of another shape compares the figures all the
/// same, for orientation; a figure the run cannot give (one client's latency under 32
/// clients' queueing) is not measured. With `--store etcd` the floor's commit is etcd's
/// quorum transaction, so the ratios are to that store's own floor.
pub fn targets(r: &Report) -> Vec<Target> {
    let one_client = r.concurrency == 1;
    let many = |v: Option<f64>| v.filter(|_| !one_client);
    let ms = |v: Option<f64>| v.map(|v| v * 1000.0);
    let mut targets = if r.mode == "full" {
        vec![
            Target::at_most(
                "full, 10 nodes, 32 clients: csivol's own CPU per cycle (server + agents)",
                many(ms(r.own_cpu_s_per_cycle)),
                1.0,
                " ms",
            ),
            Target::at_least(
                "full, 10 nodes, 32 clients: cycles/s, the reference plugin included",
                many(Some(r.cycles_per_second)),
                1000.0,
                "/s",
            ),
        ]
    } else {
        vec![
            Target::at_least(
                "server, 1,000 nodes: cycles/s",
                many(Some(r.cycles_per_second)),
                5000.0,
                "/s",
            ),
            Target::at_most(
                "server, 1,000 nodes: server CPU per cycle",
                many(ms(r.server_cpu_s_per_cycle)),
                0.3,
                " ms",
            ),
        ]
    };
    let alone = |v: Option<f64>| v.filter(|_| one_client);
    targets.extend([
        Target::at_most(
            "one client: claim -> ready p50 over the floor",
            alone(r.ratio_p50),
            2.0,
            "×",
        ),
        Target::at_most(
            "one client: claim -> ready p99 over the floor",
            alone(r.ratio_p99),
            4.0,
            "×",
        ),
        Target::at_most(
            "one client: release -> gone p50 over the floor",
            alone(r.release_ratio_p50),
            2.0,
            "×",
        ),
    ]);
    if r.mode == "full" {
        let with_100 = r.resident.as_ref().is_some_and(|res| res.per_node >= 100);
        targets.push(Target::at_most(
            "node agent resident memory with 100 claims",
            r.agent_memory
                .map(|m| m.anon_mib + m.file_mib)
                .filter(|_| with_100),
            8.0,
            " MiB",
        ));
    } else {
        targets.extend(server_targets(r));
    }
    if let Some(res) = &r.resident {
        targets.push(Target::at_most(
            "CPU per cycle with resident claims over the figure without",
            res.cpu_ratio,
            1.2,
            "×",
        ));
    }
    targets
}

/// Server mode's targets for node loss, listing and memory.
fn server_targets(r: &Report) -> Vec<Target> {
    let listed_100k = r.list_volumes_count.unwrap_or(0) >= 100_000;
    let at_10k = r.nodes >= 10_000 && listed_100k;
    vec![
        Target::at_most(
            "node loss -> blocked: excess over the TTL",
            r.node_loss_excess_s,
            1.0,
            " s",
        ),
        Target::at_most(
            "GET /v1/volumes of 100,000 volumes",
            r.list_volumes_ms.filter(|_| listed_100k),
            150.0,
            " ms",
        ),
        // Flat: the server streams the list, so its memory does not grow by the body's size.
        Target::at_most(
            "GET /v1/volumes: server peak RSS growth over the body's size",
            r.list_volumes_growth_mib
                .zip(r.list_volumes_bytes)
                .map(|(grown, bytes)| grown / (bytes as f64 / (1024.0 * 1024.0)).max(f64::EPSILON)),
            1.0,
            "×",
        ),
        Target::at_most(
            "server RSS with 100,000 volumes and 10,000 nodes, after the load",
            r.server_rss_mib.filter(|_| at_10k),
            200.0,
            " MiB",
        ),
        Target::at_most(
            "server RSS with 10,000 connected nodes and 100,000 volumes, before the load",
            r.server_idle_rss_mib.filter(|_| at_10k),
            150.0,
            " MiB",
        ),
        Target::at_most(
            "server RSS per connected idle node (1,000 nodes or more)",
            r.server_kib_per_node.filter(|_| r.nodes >= 1_000),
            4.0,
            " KiB",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_reads_as_bound_figure_and_ratio() {
        let t = Target::at_most("own CPU per cycle", Some(5.7), 1.0, " ms");
        assert_eq!(t.met, Some(false));
        assert_eq!(
            t.text(),
            "  MISSED  own CPU per cycle: at most 1.00 ms; this run 5.70 ms = 5.70× the target"
        );
        let t = Target::at_least("cycles/s", Some(1250.0), 1000.0, "/s");
        assert_eq!(t.met, Some(true));
        assert!(
            t.text().ends_with("this run 1250.00/s = 1.25× the target"),
            "{}",
            t.text()
        );
        let t = Target::at_most("one client: p50 over the floor", None, 2.0, "×");
        assert_eq!((t.met, t.ratio), (None, None));
        assert!(t.text().starts_with("  n/a     one client"), "{}", t.text());
        assert!(t.text().ends_with("this run not measured"), "{}", t.text());
    }
}
