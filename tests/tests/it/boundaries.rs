//! The boundaries between the workspace's parts that no compiler error guards on its own:
//! which source folders may use the database and HTTP libraries, what the pure decisions
//! may depend on, and what the node agent links. Each test names what crossed the line.

use std::path::{Path, PathBuf};
use std::process::Command;

mod imports;
mod lifecycle;
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

/// The files among `paths` (files or folders, relative to the workspace root) whose code
/// (comments and string literals left out) names `word`, with the first such line.
fn naming(paths: &[&str], word: &str) -> Vec<String> {
    let root = root();
    let word = regex::Regex::new(&format!(r"\b{word}\b")).unwrap();
    let literal = regex::Regex::new(r#""([^"\\]|\\.)*""#).unwrap();
    let mut found = Vec::new();
    for path in paths {
        let path = root.join(path);
        let files = if path.is_dir() {
            sources(&path)
        } else {
            vec![path]
        };
        for file in files {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let hit = text.lines().enumerate().find(|(_, line)| {
                let code = line.split("//").next().unwrap_or_default();
                word.is_match(&literal.replace_all(code, ""))
            });
            if let Some((n, line)) = hit {
                let rel = file.strip_prefix(&root).unwrap().display();
                found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn fencing_and_the_background_tasks_do_not_name_http() {
    // The server's shared state is its own type outside `http/` (`app`), and fencing and
    // the background tasks are given the parts of it they use: HTTP is one way in to the
    // state, not what the state is. (`http` → `fence` → `http` was a circle.)
    let found = naming(
        &[
            "server/src/fence",
            "server/src/background.rs",
            "server/src/app.rs",
        ],
        "http",
    );
    assert!(
        found.is_empty(),
        "fencing, the background tasks or the shared state name `http` (pass them the part \
         of `app::App` they use instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_server_reads_the_time_of_day_from_one_clock() {
    // One clock (`server/src/clock.rs`), made once where a server or a one-shot command is
    // put together and passed in: what a write records (`Txn::now`) and what the code around
    // it decides (liveness, fencing, tokens, listings, the background tasks) come from one
    // source, which a test can hold still. Elapsed time (`Instant`) is not the time of day.
    let assemblies = ["server/src/server.rs", "server/src/store/sqlite/backup.rs"];
    let root = root();
    let wall = regex::Regex::new(r"\bSystemTime\b|\bClock::wall\b").unwrap();
    let literal = regex::Regex::new(r#""([^"\\]|\\.)*""#).unwrap();
    let mut found = Vec::new();
    for file in sources(&root.join("server/src")) {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel == "server/src/clock.rs"
            || rel.contains("/tests/")
            || rel.ends_with("/tests.rs")
            || assemblies.contains(&rel.as_str())
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // A file's own tests may make a clock of their own.
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        if let Some((n, line)) = code.lines().enumerate().find(|(_, line)| {
            let code = line.split("//").next().unwrap_or_default();
            wall.is_match(&literal.replace_all(code, ""))
        }) {
            found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
        }
    }
    assert!(
        found.is_empty(),
        "server code reads the time of day itself instead of the clock it is given \
         (take a `clock::Clock` from the assembly, or `Txn::now` inside a write):\n{}",
        found.join("\n")
    );
}

/// Every hand-written `.rs` file of the workspace (the target dir and hidden folders left
/// out), relative to the workspace root.
fn workspace_sources() -> Vec<String> {
    let root = root();
    let mut out = Vec::new();
    let mut todo = vec![root.clone()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    todo.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(
                    path.strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

#[test]
fn no_hand_written_source_file_is_over_800_lines() {
    // A file that size does two jobs: split it by job. Tests, generated code and
    // benchmarks are exempt, as the repository's own check has them (`tests/` and `test/`
    // folders, `generated/`, `*.pb.rs`, `benches/`).
    let exempt = regex::Regex::new(r"(^|/)tests?/|/generated/|\.pb\.rs$|/benches/").unwrap();
    let root = root();
    let over: Vec<String> = workspace_sources()
        .into_iter()
        .filter(|f| !exempt.is_match(f))
        .filter_map(|f| {
            let lines = std::fs::read_to_string(root.join(&f))
                .unwrap()
                .lines()
                .count();
            (lines > 800).then(|| format!("{f} ({lines} lines)"))
        })
        .collect();
    assert!(
        over.is_empty(),
        "hand-written source files over 800 lines (split each by job):\n{}",
        over.join("\n")
    );
}

#[test]
fn no_file_takes_everything_of_another_room() {
    // A room is one source file, with the modules written inline in it and its tests: a
    // `tests.rs` beside it, or a `tests/` folder under it, that it declares as its tests.
    // Inside a room `use super::*` is how tests see what they test. A file that globs its
    // parent module takes every name of another room, so that a reader cannot tell where
    // a name lives and a change there reaches it unseen: it imports what it uses by name.
    let glob = regex::Regex::new(r"^(pub(\([^)]*\))?\s+)?use\s+(super::)+\*\s*;").unwrap();
    let tests = regex::Regex::new(r"(^|/)tests(/|\.rs$)").unwrap();
    let root = root();
    let mut found = Vec::new();
    for f in workspace_sources() {
        if tests.is_match(&f) {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&f)).unwrap();
        if let Some((n, line)) = text.lines().enumerate().find(|(_, l)| glob.is_match(l)) {
            found.push(format!("{f}:{}: {line}", n + 1));
        }
    }
    assert!(
        found.is_empty(),
        "files that take everything of their parent module (import the names they use):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_servers_crate_root_aliases_no_module() {
    // `crate::db` once named `store::sqlite::db` through a re-export at the crate root: a
    // reader looked for a `db.rs` that is not there. The root declares its modules; every
    // use names a module by the path where it lives.
    let text = std::fs::read_to_string(root().join("server/src/lib.rs")).unwrap();
    let alias = regex::Regex::new(r"^\s*pub(\([^)]*\))?\s+use\s").unwrap();
    let found: Vec<&str> = text.lines().filter(|l| alias.is_match(l)).collect();
    assert!(
        found.is_empty(),
        "server/src/lib.rs re-exports (import the module by its real path instead):\n{}",
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

/// `sqlite_master` as `server/tests/fixtures/sqlite-schemas.txt` writes it: one line per
/// table, index and trigger, sorted by type and name, each statement's whitespace collapsed.
fn stored_schema(conn: &rusqlite::Connection) -> String {
    let mut s = conn
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        .unwrap();
    let rows = s
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .unwrap();
    let mut out = String::new();
    for row in rows {
        let (kind, name, table, sql) = row.unwrap();
        let sql = sql.map_or_else(
            || "-".to_owned(),
            |s| s.split_whitespace().collect::<Vec<_>>().join(" "),
        );
        out.push_str(&format!("{kind} {name} on {table}: {sql}\n"));
    }
    out
}

#[test]
fn a_fresh_server_stores_the_schema_its_last_migration_shipped_with() {
    // The fixture was written from the layout that kept the migrations inline in
    // `store/sqlite/db.rs` (its header says how); wherever the migrations live now, the
    // real server's fresh `state.db` must store the same schema, since the etcd store
    // keys its rows by table and row id. The server's own tests check every version.
    let fixture =
        std::fs::read_to_string(root().join("server/tests/fixtures/sqlite-schemas.txt")).unwrap();
    let last = fixture
        .rsplit_once("-- schema version ")
        .map(|(_, s)| s)
        .expect("the fixture has a section per schema version");
    let (version, expected) = last.split_once('\n').unwrap();
    let version: i64 = version.parse().unwrap();
    let dir = csivol_tests::TestDir::new("schema");
    let data = dir.join("data");
    let mut server = csivol_tests::ServerProc::start(&data, &[]);
    server
        .proc
        .terminate(std::time::Duration::from_secs(30))
        .expect("the server stops on SIGTERM");
    let conn = rusqlite::Connection::open_with_flags(
        data.join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let stored_version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(
        stored_version, version,
        "a fresh server's schema version is not the fixture's last"
    );
    assert_eq!(
        stored_schema(&conn),
        expected,
        "a fresh server's state.db does not store the schema schema version {version} shipped with"
    );
}
