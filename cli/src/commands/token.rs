//! `csivol token create|list|revoke`. `create` prints the secret to stdout, alone, so that
//! `TOKEN=$(csivol token create --role reader)` works; it is shown only this once.

use std::time::Duration;

use anyhow::Context;
use csivol_api::{TokenInfo, TokenRequest, TokenResponse};
use csivol_client::Method;

use crate::args::TokenCommand;
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;

pub async fn run(ctx: &Ctx, cmd: TokenCommand) -> anyhow::Result<Exit> {
    match cmd {
        TokenCommand::Create(args) => {
            let req = TokenRequest {
                role: args.role,
                node: args.node.clone(),
                name: args.name.clone(),
                ttl_ms: args
                    .ttl
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                controllers: args.controllers.clone(),
            };
            let a: Answer<TokenResponse> = ctx
                .client
                .call_unkeyed(Method::POST, "/v1/tokens", Some(&req), Duration::ZERO)
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
            let expiry = t
                .expires_at
                .as_deref()
                .map(|e| format!(", expiring at {e}"))
                .unwrap_or_default();
            ctx.out.note(format!(
                "created {} token {}{named}{scope}{expiry}; the secret below is shown only this once",
                t.role, t.id
            ));
            if ctx.out.json_mode() {
                ctx.out.json(&t)?;
            } else {
                ctx.out.line(&t.token)?;
            }
        }
        TokenCommand::List => {
            let tokens: Vec<TokenInfo> = ctx
                .client
                .get("/v1/tokens")
                .await
                .context("failed to list tokens")?;
            if ctx.out.json_mode() {
                ctx.out.json(&tokens)?;
            } else {
                render::tokens(&ctx.out, &tokens)?;
            }
        }
        TokenCommand::Revoke(args) => {
            ctx.client
                .call_empty(Method::DELETE, &format!("/v1/tokens/{}", args.id))
                .await
                .with_context(|| format!("failed to revoke token `{}`", args.id))?;
            ctx.out.done(
                format!("revoked token {}", args.id),
                serde_json::json!({"outcome": "revoked", "token": args.id}),
            )?;
        }
    }
    Ok(Exit::Ok)
}
