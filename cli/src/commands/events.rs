//! `csivol events`: the audit trail, oldest first; `--follow` keeps printing new events
//! (one line, or one JSON object, per event) until interrupted.

use csivol_proto::api::Event;

use super::Ctx;
use crate::args::EventsArgs;
use crate::client::{Answer, MAX_BLOCK};
use crate::failure::Exit;
use crate::render;

/// Events per request; the server's largest page.
const PAGE: usize = 10_000;

pub async fn run(ctx: &Ctx, args: EventsArgs) -> anyhow::Result<Exit> {
    let mut filter = String::new();
    if let Some(v) = &args.volume {
        filter.push_str(&format!("&volume={v}"));
    }
    if let Some(n) = &args.node {
        filter.push_str(&format!("&node={n}"));
    }
    // Every event so far, page by page; `wait=0s` keeps the last page from blocking.
    let mut events: Vec<Event> = Vec::new();
    let mut index = 0;
    loop {
        let page: Vec<Event> = ctx
            .client
            .get(&format!(
                "/v1/events?index={index}&wait=0s&limit={PAGE}{filter}"
            ))
            .await?;
        let n = page.len();
        if let Some(last) = page.last() {
            index = last.index;
        }
        events.extend(page);
        if n < PAGE {
            break;
        }
    }
    if !args.follow {
        if ctx.out.json_mode() {
            ctx.out.json(&events)?;
        } else {
            render::events(&ctx.out, &events)?;
        }
        return Ok(Exit::Ok);
    }
    let print = |e: &Event| {
        if ctx.out.json_mode() {
            ctx.out.json_line(e)
        } else {
            ctx.out.line(render::event_line(e))
        }
    };
    for e in &events {
        print(e)?;
    }
    loop {
        let path = format!(
            "/v1/events?index={index}&wait={}ms&limit={PAGE}{filter}",
            MAX_BLOCK.as_millis()
        );
        let answer: Answer<Vec<Event>> = ctx.client.get_blocking(&path, MAX_BLOCK).await?;
        for e in &answer.body {
            index = index.max(e.index);
            print(e)?;
        }
    }
}
