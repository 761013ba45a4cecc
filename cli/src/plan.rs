//! The shared shape of the operator actions `unblock`, `detach` and `fence`: ask the server
//! for the plan (a dry run), show it, ask (or require --yes), carry it out, and optionally
//! wait until the volumes have got where the plan takes them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use csivol_api::{ActionPlan, AttachmentState, ClaimState};
use csivol_client::Method;
use serde_json::Value;

use crate::args::{ConfirmArgs, WaitArgs};
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;
use crate::wait::{self, Step};

/// The server's answer to an operator action: its plan, and what else it says.
pub trait Outcome: serde::de::DeserializeOwned + serde::Serialize {
    fn plan(&self) -> ActionPlan;

    /// Lines on what the action does besides the plan's actions (a fence's method and
    /// command, then its evidence).
    fn describe(&self) -> Vec<String> {
        Vec::new()
    }

    /// How long the server may work on the real action before it answers (a fence
    /// method's timeout), as its dry run says.
    fn runs_for(&self) -> Duration {
        Duration::ZERO
    }

    /// Whether the server keeps the real action's answer under its `Idempotency-Key`, so
    /// that it is sent again when its answer is lost (a fence's is not kept).
    const KEYED: bool = true;
}

impl Outcome for ActionPlan {
    fn plan(&self) -> ActionPlan {
        self.clone()
    }
}

pub struct Action<'a> {
    /// The endpoint taking the request.
    pub path: String,
    /// The request body for a dry run (`true`) or the real thing.
    pub body: &'a dyn Fn(bool) -> Value,
    /// What is being done, e.g. "unblock volume v1", for messages.
    pub what: String,
    /// What an empty plan means, e.g. "volume v1 has no claim on node n1".
    pub nothing: String,
    /// A warning shown with the plan before asking.
    pub warning: Option<String>,
    /// Go ahead even when the plan has no action: the action does something by itself.
    pub act_on_empty: bool,
    /// Asked on a terminal after the first confirmation (a forced fence of a ready node).
    pub second_confirmation: Option<String>,
}

pub async fn carry_out<O: Outcome>(
    ctx: &Ctx,
    action: Action<'_>,
    confirm: &ConfirmArgs,
    wait_args: &WaitArgs,
) -> anyhow::Result<Exit> {
    let failed = || format!("failed to {}", action.what);
    let planned: Answer<O> = ctx
        .client
        .call(Method::POST, &action.path, Some(&(action.body)(true)))
        .await
        .with_context(failed)?;
    let outcome = planned.body;
    let planned = outcome.plan();
    if confirm.dry_run {
        print(ctx, &outcome)?;
        return Ok(Exit::Ok);
    }
    if planned.actions.is_empty() && !action.act_on_empty {
        ctx.out.note(format!("nothing to do: {}", action.nothing));
        if ctx.out.json_mode() {
            ctx.out.json(&outcome)?;
        }
        return Ok(Exit::Ok);
    }
    if !confirm.yes {
        let mut text = String::from("This will:\n");
        for l in outcome.describe() {
            text.push_str(&format!("  {}\n", crate::escape::line(&l)));
        }
        for a in &planned.actions {
            text.push_str(&format!("  {}\n", render::action(a, false)));
        }
        if let Some(w) = &action.warning {
            text.push_str(w);
        }
        ctx.out.before_prompt(text.trim_end());
    }
    ctx.out.confirm(&action.what, confirm.yes, true)?;
    if let Some(second) = &action.second_confirmation
        && !confirm.yes
    {
        ctx.out.before_prompt(second);
        ctx.out.confirm(&action.what, confirm.yes, true)?;
    }
    let (path, body) = (&action.path, (action.body)(false));
    let done: Answer<O> = match O::KEYED {
        true => {
            (ctx.client)
                .call_running(Method::POST, path, Some(&body), outcome.runs_for())
                .await
        }
        false => {
            (ctx.client)
                .call_unkeyed(Method::POST, path, Some(&body), outcome.runs_for())
                .await
        }
    }
    .with_context(failed)?;
    let done_outcome = done.body;
    let done = done_outcome.plan();
    if done.actions != planned.actions {
        ctx.out
            .warn("things changed between the plan and the action; what was done is printed below");
    }
    print(ctx, &done_outcome)?;
    if wait_args.wait {
        wait_for(ctx, &done, wait_args.timeout).await?;
        ctx.out.note("done");
    }
    Ok(Exit::Ok)
}

/// The server's answer as it is in JSON; otherwise the description, then the plan.
fn print<O: Outcome>(ctx: &Ctx, outcome: &O) -> anyhow::Result<()> {
    if ctx.out.json_mode() {
        return ctx.out.json(outcome);
    }
    for l in outcome.describe() {
        ctx.out.one_line(l)?;
    }
    render::plan(&ctx.out, &outcome.plan())
}

/// Waits until each volume of the plan has neither a blocked claim nor an attachment left
/// on the nodes the plan acted on, and no released claim is left there.
async fn wait_for(ctx: &Ctx, plan: &ActionPlan, timeout: Duration) -> anyhow::Result<()> {
    let mut nodes: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for a in &plan.actions {
        nodes.entry(&a.volume).or_default().insert(&a.node);
    }
    let deadline = wait::Deadline::after(timeout);
    for (volume, nodes) in nodes {
        wait::volume(ctx, volume, "to be detached", deadline, |v| {
            let Some(v) = v else {
                return Step::Done;
            };
            let claims: Vec<_> = v
                .claims
                .iter()
                .filter(|c| nodes.contains(c.node.as_str()))
                .collect();
            let atts: Vec<_> = v
                .attachments
                .iter()
                .filter(|a| nodes.contains(a.node.as_str()))
                .collect();
            if claims.is_empty() && atts.is_empty() {
                return Step::Done;
            }
            let mut parts: Vec<String> = claims
                .iter()
                .map(|c| {
                    let how = match c.state {
                        ClaimState::Blocked => "blocked".to_owned(),
                        s => s.to_string(),
                    };
                    format!("claim of alloc {} on node {} is {how}", c.alloc, c.node)
                })
                .collect();
            for a in atts {
                let mut s = format!(
                    "{}attachment to node {} is {}",
                    if a.forced { "forced " } else { "" },
                    a.node,
                    a.state
                );
                if a.state == AttachmentState::Detaching {
                    s.push_str(" (waiting for ControllerUnpublishVolume)");
                }
                if let Some(e) = &a.error {
                    s.push_str(&format!(": {e}"));
                }
                parts.push(s);
            }
            Step::Waiting(parts.join("; "))
        })
        .await?;
    }
    Ok(())
}
