//! `csivol token create|list|show|revoke`. `create` prints the secret to stdout, alone, so that
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

/// `namespaces`: those `token create` narrows the new token to (`-n`, repeated).
pub async fn run(ctx: &Ctx, cmd: TokenCommand, namespaces: Vec<String>) -> anyhow::Result<Exit> {
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
                capabilities: args.capabilities.clone(),
                volumes: args.volumes.clone(),
                namespaces,
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
            let preset = t.role.preset();
            let added: Vec<&str> = t
                .capabilities
                .iter()
                .filter(|c| !preset.contains(c))
                .map(|c| c.as_str())
                .collect();
            let with = if added.is_empty() {
                String::new()
            } else {
                format!(" with {}", added.join(", "))
            };
            let mut narrowed = String::new();
            if !t.namespaces.is_empty() {
                narrowed.push_str(&format!(
                    " narrowed to namespaces {}",
                    t.namespaces.join(", ")
                ));
            }
            if !t.volumes.is_empty() {
                narrowed.push_str(&format!(" narrowed to volumes {}", t.volumes.join(", ")));
            }
            ctx.out.note(format!(
                "created {} token {}{named}{scope}{with}{narrowed}{expiry}; the secret below is \
                 shown only this once",
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
        TokenCommand::Show(args) => {
            let tokens: Vec<TokenInfo> = ctx
                .client
                .get("/v1/tokens")
                .await
                .context("failed to list tokens")?;
            let Some(t) = tokens
                .into_iter()
                .find(|t| t.id == args.id || t.name.as_deref() == Some(args.id.as_str()))
            else {
                anyhow::bail!(
                    "no token `{}`\nhint: list tokens with `csivol token list`",
                    args.id
                );
            };
            if ctx.out.json_mode() {
                ctx.out.json(&t)?;
            } else {
                render::token(&ctx.out, &t)?;
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
