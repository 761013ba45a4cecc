//! `csivol token create`: the secret goes to stdout, alone, so that
//! `TOKEN=$(csivol token create --role reader)` works; it is shown only this once.

use anyhow::Context;
use csivol_proto::api::{TokenRequest, TokenResponse};
use reqwest::Method;

use super::Ctx;
use crate::args::TokenCommand;
use crate::client::Answer;
use crate::failure::Exit;

pub async fn run(ctx: &Ctx, cmd: TokenCommand) -> anyhow::Result<Exit> {
    let TokenCommand::Create(args) = cmd;
    let req = TokenRequest {
        role: args.role,
        node: args.node.clone(),
        name: args.name.clone(),
    };
    let a: Answer<TokenResponse> = ctx
        .client
        .call(Method::POST, "/v1/tokens", Some(&req))
        .await
        .with_context(|| format!("failed to create a {} token", args.role))?;
    let t = a.body;
    let scope = t
        .node
        .as_deref()
        .map(|n| format!(" for node {n}"))
        .unwrap_or_default();
    let named = t
        .name
        .as_deref()
        .map(|n| format!(" named {n}"))
        .unwrap_or_default();
    ctx.out.note(format!(
        "created {} token {}{named}{scope}; the secret below is shown only this once",
        t.role, t.id
    ));
    if ctx.out.json_mode() {
        ctx.out.json(&t)?;
    } else {
        ctx.out.line(&t.token)?;
    }
    Ok(Exit::Ok)
}
