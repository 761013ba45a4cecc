//! `csivol events`: the audit trail, oldest first; `--since` and `--tail` narrow it;
//! `--follow` keeps printing new events (one line, or one JSON object, per event) until
//! interrupted, starting at the end of the log unless `--since` or `--tail` says otherwise.

use std::time::{Duration, SystemTime};

use csivol_api::Event;

use crate::args::EventsArgs;
use crate::client::{Answer, Cursor, MAX_BLOCK};
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;
use crate::wait::{self, Deadline};

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

/// Every event after `index` matching `filter`, page by page: plain reads (an `index`
/// without a `wait` pages through the log), which a busy server never turns away as it
/// may a blocking query. Returns them and where to follow from: the last one's index, and
/// the generation of the log it belongs to.
pub async fn all_after(
    ctx: &Ctx,
    index: u64,
    filter: &str,
) -> anyhow::Result<(Vec<Event>, Cursor)> {
    let mut events: Vec<Event> = Vec::new();
    let mut cursor = Cursor {
        index,
        generation: None,
    };
    loop {
        let path = format!("/v1/events?index={}&limit={PAGE}{filter}", cursor.index);
        let page: Answer<Vec<Event>> = ctx.client.get_blocking(&path, Duration::ZERO).await?;
        let n = page.body.len();
        if page.generation.is_some()
            && cursor.generation.is_some()
            && page.generation != cursor.generation
        {
            // The log went back in time between two pages (a backup restored): start over.
            events.clear();
            cursor = Cursor::default();
            continue;
        }
        cursor = Cursor {
            index: page.body.last().map_or(cursor.index, |e| e.index),
            generation: page.generation,
        };
        events.extend(page.body);
        if n < PAGE {
            return Ok((events, cursor));
        }
    }
}

/// The next events after `cursor` (matching `filter`), waiting up to `wait` for one; and
/// where to follow on from. A log of another generation than the cursor's (the server's
/// state went back in time: a backup restored, a server replaced) answers at once with
/// what was logged since, and this says so on stderr.
pub async fn next(
    ctx: &Ctx,
    cursor: &Cursor,
    filter: &str,
    wait: Duration,
) -> anyhow::Result<(Vec<Event>, Cursor)> {
    let path = next_path(cursor, filter, wait);
    let answer: Answer<Vec<Event>> = ctx.client.get_blocking_from(&path, cursor, wait).await?;
    Ok(followed(ctx, cursor, answer))
}

/// [`next`] for a wait with a deadline (`node drain --wait`), waiting at most what is left
/// of it: a busy server that turns the query away (503) is asked again from the same
/// cursor until the deadline ([`wait::unless_busy`]). `None`: time ran out while turned
/// away, the cursor as it was.
pub async fn next_within(
    ctx: &Ctx,
    cursor: &Cursor,
    filter: &str,
    deadline: Deadline,
) -> anyhow::Result<Option<(Vec<Event>, Cursor)>> {
    let answer = wait::unless_busy(ctx, deadline, || {
        let wait = deadline.left().min(MAX_BLOCK);
        let path = next_path(cursor, filter, wait);
        async move {
            ctx.client
                .get_blocking_from_or_busy(&path, cursor, wait)
                .await
        }
    })
    .await?;
    Ok(answer.map(|a| followed(ctx, cursor, a)))
}

fn next_path(cursor: &Cursor, filter: &str, wait: Duration) -> String {
    format!(
        "/v1/events?index={}&wait={}ms&limit={PAGE}{filter}",
        cursor.index,
        wait.as_millis()
    )
}

/// The events of an answer to a query from `cursor`, and where to follow on from.
fn followed(ctx: &Ctx, cursor: &Cursor, answer: Answer<Vec<Event>>) -> (Vec<Event>, Cursor) {
    if cursor.generation.is_some()
        && answer.generation.is_some()
        && answer.generation != cursor.generation
    {
        let from = answer.index.unwrap_or_default();
        ctx.out.note(format!(
            "the server's state is of another generation (it was restored from a backup, or \
             the server started again): following its event log on from index {}",
            answer
                .body
                .first()
                .map_or(from, |e| e.index.saturating_sub(1))
        ));
    }
    // The server's cursor as it is: after a restore the log's indexes start again lower.
    let next = Cursor {
        index: answer
            .body
            .last()
            .map_or_else(|| answer.index.unwrap_or(cursor.index), |e| e.index),
        generation: answer
            .generation
            .clone()
            .or_else(|| cursor.generation.clone()),
    };
    (answer.body, next)
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
    let (mut events, mut cursor) = all_after(ctx, 0, &filter).await?;
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
        "following the event log after index {} (Ctrl-C to stop)",
        cursor.index
    ));
    for e in &events {
        print(e)?;
    }
    loop {
        let (events, next) = next(ctx, &cursor, &filter, MAX_BLOCK).await?;
        for e in &events {
            print(e)?;
        }
        cursor = next;
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
            namespace: None,
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
