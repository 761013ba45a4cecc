//! `csivol detach`: release every claim of a volume on one node, through the node, or by
//! force when the node is lost.

use csivol_api::DetachRequest;

use csivol_api::ActionPlan;

use crate::args::DetachArgs;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::plan::{self, Action};

pub async fn run(ctx: &Ctx, args: DetachArgs) -> anyhow::Result<Exit> {
    let body = |dry_run: bool| {
        serde_json::to_value(DetachRequest {
            node: args.node.clone(),
            reason: args.reason.clone().unwrap_or_default(),
            force: args.force,
            dry_run,
        })
        .expect("plain data serialises")
    };
    let action = Action {
        path: format!("/v1/volumes/{}/detach", args.volume),
        body: &body,
        what: format!(
            "{}detach volume {} from node {}",
            if args.force { "force-" } else { "" },
            args.volume,
            args.node
        ),
        nothing: format!(
            "volume {} has no claim on node {} to release",
            args.volume, args.node
        ),
        warning: args.force.then(|| {
            "csivol cannot prove that a lost node stopped writing: force-detach only from a node \
             that is really gone or fenced, or its data may be corrupted."
                .to_owned()
        }),
        act_on_empty: false,
        second_confirmation: None,
    };
    plan::carry_out::<ActionPlan>(ctx, action, &args.confirm, &args.wait).await
}
