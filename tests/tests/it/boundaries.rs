//! The boundaries between the workspace's parts that no compiler error guards on its own:
//! which source folders may use the database and HTTP libraries, what the pure decisions
//! may depend on, and what the node agent links. Each test names what crossed the line.

use std::path::{Path, PathBuf};
use std::process::Command;

mod names;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The files below `dir`, outside `allowed` (paths relative to the workspace root), whose
/// code names one of `crates` (`name::` or `use name`), with the first such line.
fn uses_outside(dir: &str, allowed: &[&str], crates: &[&str]) -> Vec<String> {
    let root = root();
    let mut found = Vec::new();
    for path in sources(&root.join(dir)) {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if allowed
            .iter()
            .any(|a| rel == *a || rel.starts_with(&format!("{a}/")))
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let hit = text.lines().enumerate().find(|(_, line)| {
            let code = line.split("//").next().unwrap_or_default();
            crates.iter().any(|c| {
                code.contains(&format!("{c}::"))
                    || code.trim_start().starts_with(&format!("use {c}"))
            })
        });
        if let Some((n, line)) = hit {
            found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
        }
    }
    found
}

#[test]
fn every_sql_statement_is_behind_a_store() {
    // The server's state changes through `store/` alone, so that the etcd mirror (and any
    // later store) sees every write through one door; the agent's own agent.db is its
    // `store` module's.
    let server = uses_outside("server/src", &["server/src/store"], &["rusqlite"]);
    assert!(
        server.is_empty(),
        "SQL outside server/src/store/ (add a method to `store::Snapshot` or `store::Txn`):\n{}",
        server.join("\n")
    );
    let agent = uses_outside("agent/src", &["agent/src/store.rs"], &["rusqlite"]);
    assert!(
        agent.is_empty(),
        "SQL outside agent/src/store.rs (agent.db is that module's):\n{}",
        agent.join("\n")
    );
}

#[test]
fn http_types_stay_in_the_servers_http_folder() {
    // Below the edge, errors carry a kind and the lifecycle takes plain values; only
    // `http/` knows status codes, extractors and the accept loop.
    let found = uses_outside(
        "server/src",
        &["server/src/http"],
        &["axum", "hyper", "hyper_util", "tower"],
    );
    assert!(
        found.is_empty(),
        "HTTP types outside server/src/http/:\n{}",
        found.join("\n")
    );
}

/// The `[dependencies]` of a crate's manifest, by name.
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            out.push(name.to_owned());
        }
    }
    out.sort();
    out
}

#[test]
fn the_decisions_depend_on_the_api_types_alone() {
    // The compiler keeps I/O out of csivol-rules as long as its manifest names nothing
    // that does I/O: the API types, serde's derives and humantime's parser.
    let deps = dependencies(&root().join("rules/Cargo.toml"));
    assert_eq!(
        deps,
        ["csivol-api", "humantime", "serde"],
        "csivol-rules must stay pure: a decision takes what the shell read as arguments"
    );
}

/// `cargo tree -p csivol-agent --prefix none` with `args`, one line per entry.
fn agent_tree(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .current_dir(root())
        .args(["tree", "--frozen", "-p", "csivol-agent", "--prefix", "none"])
        .args(args)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_node_agent_links_no_server_code() {
    let tree = agent_tree(&["-e", "normal"]);
    let linked: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(linked.contains(&"csivol-agent"), "{tree}");
    for server_only in [
        "axum",
        "csivol-etcd-client",
        "chacha20poly1305",
        "rcgen",
        "prometheus-client",
        "csivol-hostpath",
        "csivol-server",
    ] {
        assert!(
            !linked.contains(&server_only),
            "csivol-agent links {server_only}: `cargo tree -p csivol-agent -e normal -i {server_only}` says through what"
        );
    }
    // hyper comes with its HTTP and gRPC clients; its server half must not.
    let hyper = agent_tree(&["-e", "normal,features", "-i", "hyper"]);
    assert!(hyper.contains("hyper feature \"client\""), "{hyper}");
    assert!(
        !hyper.contains("hyper feature \"server\""),
        "csivol-agent builds hyper's server: `cargo tree -p csivol-agent -e features -i hyper` says through what"
    );
}
