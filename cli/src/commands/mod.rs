//! One module per command; each takes its parsed arguments and returns the exit code.

mod availability;
mod claim;
pub mod completions;
mod detach;
mod events;
mod expand;
mod fence;
mod fresh;
mod import;
mod modify;
mod namespace;
mod node;
mod plugin;
mod pool;
mod release;
mod run;
mod snapshot;
mod status;
mod suggest;
mod token;
mod unblock;
mod volume;

use crate::args::{Cli, Command, CompleteArgs};
use crate::client::Client;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::output::Out;

/// `csivol __complete volumes|nodes`.
pub async fn complete(args: CompleteArgs, out: Out) -> anyhow::Result<Exit> {
    let ctx = Ctx {
        client: Client::from_args(&args.global)?,
        out,
    };
    completions::names(&ctx, &args.what).await
}

pub async fn run(mut cli: Cli, out: Out) -> anyhow::Result<Exit> {
    // `token create -n NS...` narrows the new token to them: the request itself names none.
    let token_namespaces = match cli.command {
        Command::Token(_) => std::mem::take(&mut cli.global.namespace),
        _ => Vec::new(),
    };
    // Commands that need no server come first, so they work without an address or token.
    let command = match cli.command {
        Command::Completions(args) => return completions::run(&out, args),
        command => command,
    };
    let ctx = Ctx {
        client: Client::from_args(&cli.global)?,
        out,
    };
    let result = match command {
        Command::Volume(cmd) => volume::run(&ctx, cmd).await,
        Command::Snapshot(cmd) => snapshot::run(&ctx, cmd).await,
        Command::Claim(args) => claim::run(&ctx, args).await,
        Command::Release(args) => release::run(&ctx, args).await,
        Command::Run(args) => run::run(&ctx, args).await,
        Command::Status(args) => status::run(&ctx, args).await,
        Command::Unblock(args) => unblock::run(&ctx, args).await,
        Command::Detach(args) => detach::run(&ctx, args).await,
        Command::Fence(args) => fence::run(&ctx, args).await,
        Command::Pool(cmd) => pool::run(&ctx, cmd).await,
        Command::Namespace(cmd) => namespace::run(&ctx, cmd).await,
        Command::Node(cmd) => node::run(&ctx, cmd).await,
        Command::Plugin(cmd) => plugin::run(&ctx, cmd).await,
        Command::Events(args) => events::run(&ctx, args).await,
        Command::Token(cmd) => token::run(&ctx, cmd, token_namespaces).await,
        Command::Completions(_) => unreachable!("handled above"),
    };
    match result {
        Err(e) => Err(suggest::closest_name(&ctx, e).await),
        ok => ok,
    }
}
