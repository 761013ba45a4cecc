//! `csivol events`: the audit trail, oldest first; `--since` and `--tail` narrow it;
//! `--follow` keeps printing new events (one line, or one JSON object, per event) until
//! interrupted, starting at the end of the log unless `--since` or `--tail` says otherwise.

use std::time::{Duration, SystemTime};

use csivol_api::Event;

use crate::args::EventsArgs;
use crate::client::{Answer, MAX_BLOCK};
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;

/// Events per request; the server's largest page.
const PAGE: usize = 10_000;

/// The `&volume=...&node=...` part of an events query.
pub fn filter(volume: Option<&str>, node: Option<&str>) -> String {
    let mut filter = String::new();
    if let Some(v) = volume {
        filter.push_str(&format!("&volume={v}"));
    }
    if let Some(n) = node {
        filter.push_str(&format!("&node={n}"));
    }
    filter
}

/// Every event after `index` matching `filter`, page by page; `wait=0s` keeps the last page
/// from blocking. Returns them and the index to follow from.
pub async fn all_after(
    ctx: &Ctx,
    mut index: u64,
    filter: &str,
) -> anyhow::Result<(Vec<Event>, u64)> {
    let mut events: Vec<Event> = Vec::new();
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
            return Ok((events, index));
        }
    }
}

/// Keeps the events of the last `since` and then the last `tail` of them.
fn narrow(events: &mut Vec<Event>, since: Option<Duration>, tail: Option<usize>) {
    if let Some(since) = since {
        let from = SystemTime::now()
            .checked_sub(since)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        events.retain(|e| humantime::parse_rfc3339_weak(&e.at).map_or(true, |at| at >= from));
    }
    if let Some(n) = tail {
        let skip = events.len().saturating_sub(n);
        events.drain(..skip);
    }
}

pub async fn run(ctx: &Ctx, args: EventsArgs) -> anyhow::Result<Exit> {
    let filter = filter(args.volume.as_deref(), args.node.as_deref());
    let (mut events, mut index) = all_after(ctx, 0, &filter).await?;
    if args.follow && args.since.is_none() && args.tail.is_none() {
        // `-f` alone is `tail -f`: what happens from now on.
        events.clear();
    }
    narrow(&mut events, args.since, args.tail);
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
            ctx.out.one_line(render::event_line(e))
        }
    };
    ctx.out.note(format!(
        "following the event log after index {index} (Ctrl-C to stop)"
    ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(index: u64, at: &str) -> Event {
        Event {
            index,
            at: at.into(),
            kind: "k".into(),
            volume: None,
            node: None,
            alloc: None,
            actor: "a".into(),
            message: "m".into(),
        }
    }

    #[test]
    fn since_and_tail_narrow_the_log() {
        let now = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let all = vec![
            event(1, "2020-01-01T00:00:00Z"),
            event(2, "2020-01-01T00:00:01Z"),
            event(3, &now),
        ];
        let indexes = |since, tail| {
            let mut es = all.clone();
            narrow(&mut es, since, tail);
            es.iter().map(|e| e.index).collect::<Vec<_>>()
        };
        assert_eq!(indexes(None, None), [1, 2, 3]);
        assert_eq!(indexes(Some(Duration::from_secs(3600)), None), [3]);
        assert_eq!(indexes(None, Some(2)), [2, 3]);
        assert_eq!(indexes(None, Some(0)), Vec::<u64>::new());
        assert_eq!(indexes(Some(Duration::from_secs(3600)), Some(5)), [3]);
    }
}
