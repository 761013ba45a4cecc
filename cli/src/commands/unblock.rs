//! `csivol unblock`: an operator's statement that a lost node is gone or fenced, so its
//! blocked claims are force-released and its attachments force-detached.

use csivol_api::{NodeUnblockRequest, UnblockRequest};

use csivol_api::ActionPlan;

use crate::args::UnblockArgs;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::plan::{self, Action};

pub async fn run(ctx: &Ctx, args: UnblockArgs) -> anyhow::Result<Exit> {
    let reason = args.reason.clone().unwrap_or_default();
    let (path, what, node) = match (&args.volume, &args.node) {
        (Some(v), Some(n)) => (
            format!("/v1/volumes/{v}/unblock"),
            format!("unblock volume {v} on node {n}"),
            Some(n.clone()),
        ),
        (Some(v), None) => (
            format!("/v1/volumes/{v}/unblock"),
            format!("unblock volume {v}"),
            None,
        ),
        (None, Some(n)) => (
            format!("/v1/nodes/{n}/unblock"),
            format!("unblock every volume of node {n}"),
            None,
        ),
        (None, None) => unreachable!("clap requires a volume or a node"),
    };
    let by_volume = args.volume.is_some();
    let body = move |dry_run: bool| {
        if by_volume {
            serde_json::to_value(UnblockRequest {
                reason: reason.clone(),
                node: node.clone(),
                dry_run,
            })
        } else {
            serde_json::to_value(NodeUnblockRequest {
                reason: reason.clone(),
                dry_run,
            })
        }
        .expect("plain data serialises")
    };
    let action = Action {
        path,
        body: &body,
        nothing: "nothing is blocked".into(),
        what,
        warning: Some(
            "csivol cannot prove that a lost node stopped writing: unblock only a node that is \
             really gone or fenced, or its data may be corrupted."
                .into(),
        ),
        act_on_empty: false,
        second_confirmation: None,
    };
    plan::carry_out::<ActionPlan>(ctx, action, &args.confirm, &args.wait).await
}
