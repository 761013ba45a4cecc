//! `csivol node list|show|drain|eligibility|label|remove`: a node as an object the
//! operator acts on as a whole.

use csivol_api::{
    AttachmentState, Claim, Eligibility, EligibilityRequest, Event, Node, NodeLabelRequest, Volume,
};
use csivol_client::Method;

use crate::args::{LabelChange, NodeCommand, NodeDrainArgs, NodeEligibilityArgs, NodeLabelArgs};
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};
use crate::output::given_duration;
use crate::render;

/// Events `node show` lists, the latest.
const RECENT_EVENTS: usize = 10;

pub async fn run(ctx: &Ctx, cmd: NodeCommand) -> anyhow::Result<Exit> {
    match cmd {
        NodeCommand::List => {
            let nodes: Vec<Node> = ctx.client.get("/v1/nodes").await?;
            if ctx.out.json_mode() {
                ctx.out.json(&nodes)?;
            } else {
                render::nodes(&ctx.out, &nodes)?;
            }
        }
        NodeCommand::Show(args) => show(ctx, &args.node).await?,
        NodeCommand::Drain(args) => return drain(ctx, args).await,
        NodeCommand::Eligibility(args) => eligibility(ctx, args).await?,
        NodeCommand::Label(args) => label(ctx, args).await?,
        NodeCommand::Remove(args) => {
            ctx.client
                .call_empty(Method::DELETE, &format!("/v1/nodes/{}", args.node))
                .await
                .map_err(|e| e.context(format!("failed to remove node `{}`", args.node)))?;
            ctx.out.done(
                format!("removed node {}", args.node),
                serde_json::json!({"outcome": "removed", "node": args.node}),
            )?;
        }
    }
    Ok(Exit::Ok)
}

/// What is on a node: its claims and attachments, from the volumes that have any there.
pub struct OnNode {
    pub claims: Vec<Claim>,
    /// `(volume, state, error)`.
    pub attachments: Vec<(String, AttachmentState, Option<String>)>,
}

impl OnNode {
    fn of(node: &str, volumes: &[Volume]) -> Self {
        let claims = volumes
            .iter()
            .flat_map(|v| &v.claims)
            .filter(|c| c.node == node)
            .cloned()
            .collect();
        let attachments = volumes
            .iter()
            .flat_map(|v| &v.attachments)
            .filter(|a| a.node == node)
            .map(|a| (a.volume.clone(), a.state, a.error.clone()))
            .collect();
        Self {
            claims,
            attachments,
        }
    }

    fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.attachments.is_empty()
    }

    /// `2 claims (v1/a1, v2/a2) and 1 attachment (v3)`.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.claims.is_empty() {
            let names: Vec<String> = self
                .claims
                .iter()
                .map(|c| format!("{}/{}", c.volume, c.alloc))
                .collect();
            parts.push(format!(
                "{} ({})",
                count(self.claims.len(), "claim"),
                names.join(", ")
            ));
        }
        if !self.attachments.is_empty() {
            let names: Vec<&str> = self.attachments.iter().map(|a| a.0.as_str()).collect();
            parts.push(format!(
                "{} ({})",
                count(self.attachments.len(), "attachment"),
                names.join(", ")
            ));
        }
        parts.join(" and ")
    }
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

async fn on_node(ctx: &Ctx, node: &str) -> anyhow::Result<(Vec<Volume>, OnNode)> {
    let volumes: Vec<Volume> = ctx.client.get(&format!("/v1/volumes?node={node}")).await?;
    let on = OnNode::of(node, &volumes);
    Ok((volumes, on))
}

async fn show(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    let node: Node = ctx.client.get(&format!("/v1/nodes/{name}")).await?;
    if ctx.out.json_mode() {
        return ctx.out.json(&node);
    }
    let (volumes, on) = on_node(ctx, name).await?;
    render::node(&ctx.out, &node, on.claims.len())?;

    ctx.out.line("")?;
    if on.claims.is_empty() {
        ctx.out.line("claims: none")?;
    } else {
        ctx.out.line("claims:")?;
        render::node_claims(&ctx.out, &on.claims)?;
    }
    ctx.out.line("")?;
    if on.attachments.is_empty() {
        ctx.out.line("attachments: none")?;
    } else {
        ctx.out.line("attachments:")?;
        let mut t = ctx.out.table(&["VOLUME", "STATE", "ERROR"]);
        for (v, s, e) in &on.attachments {
            t.add_row([
                v.clone(),
                s.to_string(),
                e.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        ctx.out.print_table(t)?;
    }
    let blocked = super::status::blocked(&volumes, std::slice::from_ref(&node), Some(name));
    if !blocked.is_empty() {
        ctx.out.line("")?;
        ctx.out.line("blocked volumes:")?;
        super::status::blocked_table(ctx, &blocked)?;
    }

    // The latest events about the node: page to the end of its log, keep the last few.
    let mut events: Vec<Event> = Vec::new();
    let mut index = 0;
    loop {
        let page: Vec<Event> = ctx
            .client
            .get(&format!("/v1/events?index={index}&limit=10000&node={name}"))
            .await?;
        let Some(last) = page.last() else { break };
        index = last.index;
        let n = page.len();
        events.extend(page);
        let keep = events.len().saturating_sub(RECENT_EVENTS);
        events.drain(..keep);
        if n < 10_000 {
            break;
        }
    }
    ctx.out.line("")?;
    if events.is_empty() {
        ctx.out.line("recent events: none")?;
    } else {
        ctx.out.line("recent events:")?;
        render::events(&ctx.out, &events)?;
    }
    Ok(())
}

async fn eligibility(ctx: &Ctx, args: NodeEligibilityArgs) -> anyhow::Result<()> {
    let wanted = if args.enable {
        Eligibility::Eligible
    } else {
        Eligibility::Ineligible
    };
    let node = set(ctx, &args.node, wanted).await?;
    if ctx.out.json_mode() {
        return ctx.out.json(&node);
    }
    ctx.out.line(match wanted {
        Eligibility::Eligible => format!("node {} takes new claims", args.node),
        _ => format!(
            "node {} takes no new claims; its claims stay until their owners release them",
            args.node
        ),
    })
}

async fn label(ctx: &Ctx, args: NodeLabelArgs) -> anyhow::Result<()> {
    let mut req = NodeLabelRequest::default();
    for c in args.changes {
        match c {
            LabelChange::Set(k, v) => {
                req.set.insert(k, v);
            }
            LabelChange::Remove(k) => req.remove.push(k),
        }
    }
    let node: Node = ctx
        .client
        .call(
            Method::POST,
            &format!("/v1/nodes/{}/labels", args.node),
            Some(&req),
        )
        .await?
        .body;
    if ctx.out.json_mode() {
        return ctx.out.json(&node);
    }
    ctx.out.line(format!(
        "labels of node {}: {}",
        node.name,
        render::labels_of(&node.labels)
    ))?;
    ctx.out
        .line(format!("fence method: {}", render::fence_method(&node)))
}

async fn set(ctx: &Ctx, node: &str, eligibility: Eligibility) -> anyhow::Result<Node> {
    let answer = ctx
        .client
        .call::<_, Node>(
            Method::POST,
            &format!("/v1/nodes/{node}/eligibility"),
            Some(&EligibilityRequest { eligibility }),
        )
        .await?;
    Ok(answer.body)
}

async fn drain(ctx: &Ctx, args: NodeDrainArgs) -> anyhow::Result<Exit> {
    let name = &args.node;
    let node = set(ctx, name, Eligibility::Draining).await?;
    let (_, on) = on_node(ctx, name).await?;
    if !args.wait {
        if ctx.out.json_mode() {
            ctx.out.json(&node)?;
        } else if on.is_empty() {
            ctx.out.line(format!(
                "node {name} is drained: nothing is claimed on or attached to it"
            ))?;
        } else {
            ctx.out.line(format!(
                "node {name} is draining: no new claims; it still has {} until their owners release the claims",
                on.describe()
            ))?;
            ctx.out.note(format!(
                "hint: csivol node drain {name} --wait waits until it is empty"
            ));
        }
        return Ok(Exit::Ok);
    }
    let started = tokio::time::Instant::now();
    let deadline = started + args.deadline;
    let mut progress = ctx.out.progress();
    let filter = format!("&node={name}");
    let mut cursor = crate::client::Cursor::default();
    loop {
        // Caught up with the node's log first, then the look: a release after the look is
        // an event after the cursor, which ends the wait below.
        let (_, caught_up) = super::events::all_after(ctx, cursor.index, &filter).await?;
        cursor = caught_up;
        let (_, on) = on_node(ctx, name).await?;
        if on.is_empty() {
            progress.finish();
            if ctx.out.json_mode() {
                let node: Node = ctx.client.get(&format!("/v1/nodes/{name}")).await?;
                ctx.out.json(&node)?;
            } else {
                ctx.out.line(format!(
                    "node {name} is drained: nothing is claimed on or attached to it"
                ))?;
                ctx.out.note(format!(
                    "hint: csivol node remove {name} forgets it; csivol node eligibility {name} --enable puts it back in service"
                ));
            }
            return Ok(Exit::Ok);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            progress.finish();
            return Err(Failure::new(
                Exit::TimedOut,
                format!(
                    "timed out after {} waiting for node {name} to be drained: it still has {}",
                    given_duration(args.deadline),
                    on.describe()
                ),
            )
            .hint(format!(
                "the node stays draining (no new claims); ask the owners to release their claims \
                 (csivol node show {name}), or wait longer with --deadline"
            ))
            .into());
        }
        progress.set(&format!(
            "draining node {name}: it still has {} (claims are released by their owners, then the node detaches)",
            on.describe()
        ));
        let wait = (deadline - now).min(crate::client::MAX_BLOCK);
        let (_, next) = super::events::next(ctx, &cursor, &filter, wait).await?;
        cursor = next;
    }
}
