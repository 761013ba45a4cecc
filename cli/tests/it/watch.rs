//! Watching: `events --since/--tail`, `events -f` starting at the end, `status --watch`
//! redrawing when something changes.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStdout;

use crate::support::Env;

/// Reads stdout lines until one satisfies `done`, within a deadline; returns them all.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<ChildStdout>>,
    done: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let stop = done(&line);
            seen.push(line);
            if stop {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out; read so far: {seen:#?}"));
    seen
}

#[tokio::test]
async fn events_since_tail_and_follow_from_the_end() {
    let env = Env::start("events-watch");
    for v in ["v1", "v2", "v3"] {
        env.volume(v, "single-node-writer").await;
    }
    let r = env.run(&["events", "--tail", "2", "-o", "json"]).await;
    let vols: Vec<String> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["volume"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(vols, ["v2", "v3"], "{r}");
    let r = env.run(&["events", "--since", "1h", "-o", "json"]).await;
    assert_eq!(r.json().as_array().unwrap().len(), 3, "{r}");
    let r = env.run(&["events", "--since", "1h", "--tail", "1"]).await;
    assert_eq!(r.stdout.lines().count(), 2, "{r}");

    // `-f` alone prints only what happens from now on: the first line is v4's.
    let mut child = env.command(&["events", "-f"]).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // It says on stderr where it follows from once it looked: v4 comes after that.
    let mut talk = BufReader::new(child.stderr.take().unwrap()).lines();
    let note = tokio::time::timeout(Duration::from_secs(20), talk.next_line())
        .await
        .expect("a note within 20s")
        .unwrap()
        .expect("a line");
    assert!(
        note.starts_with("following the event log after index "),
        "{note}"
    );
    env.volume("v4", "single-node-writer").await;
    let seen = read_until(&mut lines, |l| l.contains("volume=v4")).await;
    assert_eq!(seen.len(), 1, "{seen:#?}");
    child.kill().await.unwrap();

    // With --tail, it starts that far back.
    let mut child = env
        .command(&["events", "-f", "--tail", "1"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let seen = read_until(&mut lines, |l| l.contains("volume=v4")).await;
    assert_eq!(seen.len(), 1, "{seen:#?}");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn status_watch_redraws_when_something_changes() {
    let env = Env::start("status-watch");
    env.volume("v1", "single-node-writer").await;
    let mut child = env.command(&["status", "--watch"]).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = read_until(&mut lines, |l| l.starts_with("v1 ")).await;
    assert_eq!(first[0], "volumes: 1 (1 free)", "{first:#?}");
    env.volume("v2", "single-node-writer").await;
    let second = read_until(&mut lines, |l| l.starts_with("v2 ")).await;
    assert!(
        second.contains(&"volumes: 2 (2 free)".to_owned()),
        "{second:#?}"
    );
    child.kill().await.unwrap();
}
