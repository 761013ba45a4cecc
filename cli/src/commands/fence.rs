//! `csivol fence`: unblock with proof. The server runs the node's fence method, which
//! exits 0 only once the node is confirmed off; on success it records the evidence, marks
//! the node fenced and unblocks its volumes. Same dry run → confirm → act shape as
//! `unblock`.

use std::time::Duration;

use csivol_api::{ActionPlan, FenceOutcome, FenceRecord, FenceRequest};

use crate::args::FenceArgs;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::plan::{self, Action, Outcome};

pub async fn run(ctx: &Ctx, args: FenceArgs) -> anyhow::Result<Exit> {
    let node = args.node.clone();
    let (reason, force) = (args.reason.clone(), args.force);
    let body = move |dry_run: bool| {
        serde_json::to_value(FenceRequest {
            reason: reason.clone(),
            dry_run,
            force,
        })
        .expect("plain data serialises")
    };
    let action = Action {
        path: format!("/v1/nodes/{node}/fence"),
        body: &body,
        what: format!("fence node {node}"),
        nothing: format!("node {node} holds no volume"),
        warning: Some(format!(
            "The fence method powers node {node} off; only a confirmed fence (exit 0) frees its volumes."
        )),
        act_on_empty: true,
        second_confirmation: force.then(|| {
            format!(
                "Node {node} is not lost: its agent may be running workloads that write to these volumes. Fence it anyway?"
            )
        }),
    };
    plan::carry_out::<FenceOutcome>(ctx, action, &args.confirm, &args.wait).await
}

/// A fence's plan is the unblock it carries out; before it, the method and command, after
/// it, the evidence.
impl Outcome for FenceOutcome {
    /// A fence method runs outside the server's write transaction, which keeps no key for
    /// it: a fence whose answer was lost is not sent again (`csivol node show` tells what
    /// happened).
    const KEYED: bool = false;

    fn plan(&self) -> ActionPlan {
        ActionPlan {
            dry_run: self.dry_run,
            actions: self.actions.clone(),
        }
    }

    fn describe(&self) -> Vec<String> {
        describe(self)
    }

    fn runs_for(&self) -> Duration {
        // The method's timeout, and the moment the server gives its output after it.
        Duration::from_millis(self.timeout_ms) + Duration::from_secs(5)
    }
}
/// The method and command before the fence; the evidence after it.
fn describe(o: &FenceOutcome) -> Vec<String> {
    let timeout = humantime::format_duration(Duration::from_millis(o.timeout_ms));
    match &o.fence {
        None => vec![format!(
            "run fence method {} for node {}: {} (timeout {timeout}), then mark it fenced",
            o.method,
            o.node,
            command(&o.command)
        )],
        Some(f) => evidence(f),
    }
}

fn evidence(f: &FenceRecord) -> Vec<String> {
    let mut lines = vec![
        format!(
            "fenced node {} (fence #{}) by method {}: {} exited {} in {}",
            f.node,
            f.id,
            f.method,
            command(&f.command),
            f.exit_status
                .map_or_else(|| "-".to_owned(), |c| c.to_string()),
            humantime::format_duration(Duration::from_millis(f.duration_ms))
        ),
        format!("  by {} at {}: {}", f.actor, f.at, f.reason),
    ];
    for l in f.output.lines().filter(|l| !l.trim().is_empty()).take(10) {
        lines.push(format!("  | {l}"));
    }
    lines
}

/// A command line as it would be typed.
pub fn command(c: &[String]) -> String {
    c.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|ch: char| ch.is_whitespace() || ch == '\'' || ch == '"')
            {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
