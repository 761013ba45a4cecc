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

/// The code of a Rust file without its comments, string and character literals and
/// visibilities (`pub(super)` names no module it uses), and without a `#[cfg(test)]`
/// module at its end: what it imports, not what it says.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                out.push_str("\"\"");
            }
            // A character literal ('x', '\''); a lifetime ('a) is left as it is.
            '\'' if chars.get(i + 1) == Some(&'\\') => {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
            }
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 2,
            c => out.push(c),
        }
        i += 1;
    }
    regex::Regex::new(r"\bpub\s*\([^)]*\)")
        .unwrap()
        .replace_all(&out, "pub")
        .into_owned()
}

/// Every path a `use` declaration of `code` brings in, its braces expanded
/// (`use super::{a, b::{c, d}};` gives `super::a`, `super::b::c`, `super::b::d`).
fn use_paths(code: &str) -> Vec<String> {
    fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        let Some(open) = tree.find('{') else {
            let path = tree.split(" as ").next().unwrap_or_default().trim();
            out.push(format!("{prefix}{path}"));
            return;
        };
        let head = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').expect("a closing brace")];
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&format!("{prefix}{head}"), &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if !inner[start..].trim().is_empty() {
            expand(&format!("{prefix}{head}"), &inner[start..], out);
        }
    }
    let decl = regex::Regex::new(r"(?s)\buse\s+([^;]+);").unwrap();
    let mut out = Vec::new();
    for m in decl.captures_iter(code) {
        expand("", &m[1], &mut out);
    }
    out
}

/// The import graph of the source files below `dir` (one Rust module tree whose root is
/// `dir/mod.rs`, named `root_path` from the crate root, e.g. `crate::lifecycle`), its
/// `tests/` folder left out: for each file (relative to `dir`), the files of the tree its
/// `use` declarations and the paths in its code (`super::x::y`, `crate::lifecycle::x`, a
/// child module's `x::y`) name, each resolved to the deepest file the path reaches.
fn import_graph(
    dir: &Path,
    root_path: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let files: Vec<String> = sources(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
        .filter(|p| !p.starts_with("tests/"))
        .collect();
    // A module path (`["ops", "queue"]`) and the file that holds it.
    let module_of = |file: &str| -> Vec<String> {
        let stem = file.trim_end_matches(".rs");
        let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    };
    let file_of = |module: &[String]| -> Option<String> {
        let joined = module.join("/");
        [format!("{joined}.rs"), format!("{joined}/mod.rs")]
            .into_iter()
            .map(|f| f.trim_start_matches('/').to_owned())
            .find(|f| files.contains(f))
    };
    let inline = regex::Regex::new(r"\b[a-z_][a-z0-9_]*(?:::\w+)+").unwrap();
    let mut graph = std::collections::BTreeMap::new();
    for file in &files {
        let code = code_of(&std::fs::read_to_string(dir.join(file)).unwrap());
        let here = module_of(file);
        let mut paths = use_paths(&code);
        paths.extend(inline.find_iter(&code).map(|m| m.as_str().to_owned()));
        let mut arrows = std::collections::BTreeSet::new();
        for path in paths {
            let mut segments: Vec<&str> = path.split("::").map(str::trim).collect();
            let mut module: Vec<String> = match segments.first() {
                Some(&"crate") => {
                    let root: Vec<&str> = root_path.split("::").collect();
                    if !segments.starts_with(&root) {
                        continue;
                    }
                    segments.drain(..root.len());
                    Vec::new()
                }
                Some(&"self") => {
                    segments.remove(0);
                    here.clone()
                }
                Some(&"super") => {
                    let mut m = here.clone();
                    while segments.first() == Some(&"super") {
                        segments.remove(0);
                        if m.pop().is_none() {
                            // Above the tree's root: another part of the crate.
                            m = vec!["..".to_owned()];
                            break;
                        }
                    }
                    m
                }
                // A child module of this one, by its name (`use queue::schedule;` in a
                // folder's mod.rs); any other name is another crate's or an item's.
                Some(first) => {
                    let mut child = here.clone();
                    child.push((*first).to_owned());
                    if file_of(&child).is_none() {
                        continue;
                    }
                    here.clone()
                }
                None => continue,
            };
            if module.first().is_some_and(|m| m == "..") {
                continue;
            }
            for s in segments {
                module.push(s.to_owned());
                if file_of(&module).is_none() {
                    module.pop();
                    break;
                }
            }
            if let Some(target) = file_of(&module)
                && target != *file
            {
                arrows.insert(target);
            }
        }
        graph.insert(file.clone(), arrows);
    }
    graph
}

/// The import circles of `graph`: each set of files that import one another (Tarjan's
/// strongly connected components of more than one file), with the arrows inside it.
fn circles(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        index: std::collections::HashMap<&'a str, usize>,
        low: std::collections::HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: std::collections::HashSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    let mut arrows: Vec<String> = Vec::new();
                    for a in &component {
                        for b in &self.graph[*a] {
                            if component.contains(&b.as_str()) {
                                arrows.push(format!("{a} -> {b}"));
                            }
                        }
                    }
                    arrows.sort();
                    self.found.push(arrows);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: Default::default(),
        low: Default::default(),
        stack: Vec::new(),
        on_stack: Default::default(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The files `from` reaches through `graph`, itself included.
fn reached(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    from: &str,
) -> std::collections::BTreeSet<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(f) = todo.pop() {
        if seen.insert(f.clone()) {
            todo.extend(graph.get(&f).into_iter().flatten().cloned());
        }
    }
    seen
}

#[test]
fn the_lifecycle_has_no_import_circle() {
    // Each job of the lifecycle stands on the ones below it: a file that imports one that
    // imports it back ties two jobs into one, and a change to either moves both.
    let graph = import_graph(&root().join("server/src/lifecycle"), "crate::lifecycle");
    assert!(
        graph.len() > 20 && graph.values().map(|a| a.len()).sum::<usize>() > 50,
        "the lifecycle's imports were not read: {graph:?}"
    );
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "server/src/lifecycle/ has import circles (import the lower file's real path, or \
         move what both need below both):\n{}",
        found
            .iter()
            .map(|c| c.join("\n  "))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

#[test]
fn admission_stands_below_claims_and_attachments() {
    // Who may claim, where, and who waits is one module that claims and attachments both
    // ask and that asks neither of them.
    let graph = import_graph(&root().join("server/src/lifecycle"), "crate::lifecycle");
    let below = reached(&graph, "admission.rs");
    for above in ["claims.rs", "attachments.rs"] {
        assert!(
            graph[above].contains("admission.rs"),
            "{above} does not ask admission.rs: {:?}",
            graph[above]
        );
        assert!(
            !below.contains(above),
            "admission.rs reaches {above} through its imports: {below:?}"
        );
    }
}

/// The variants of `enum name` in the Rust source `text` (struct-like or unit, one per
/// line, as rustfmt writes them), with the fields of each.
fn variants(text: &str, name: &str) -> Vec<(String, String)> {
    let start = text
        .find(&format!("pub enum {name} {{"))
        .unwrap_or_else(|| panic!("no enum {name}"));
    let body = &text[start..];
    let variant = regex::Regex::new(r"(?m)^    ([A-Z]\w*)\b").unwrap();
    let end = body.find("\n}").expect("the enum's end");
    let body = &body[..end];
    let starts: Vec<(usize, String)> = variant
        .captures_iter(body)
        .map(|c| (c.get(0).unwrap().start(), c[1].to_owned()))
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(i, (at, v))| {
            let to = starts.get(i + 1).map_or(body.len(), |n| n.0);
            (v.clone(), body[*at..to].to_owned())
        })
        .collect()
}

#[test]
fn the_controller_queue_engine_names_no_operation_kind() {
    // The engine schedules, hands out, retries, fails and shows operations; each kind of
    // operation plugs in through its file of `ops/kinds/` and a row of the table there,
    // so that a new kind never changes the engine.
    let root = root();
    let engine_file = "server/src/lifecycle/ops/queue.rs";
    let engine = code_of(&std::fs::read_to_string(root.join(engine_file)).unwrap());
    let kinds = std::fs::read_to_string(root.join("rules/src/kinds.rs")).unwrap();
    let op_kinds = regex::Regex::new(r"(?s)OpKind \{(.*?)\n    \}")
        .unwrap()
        .captures(&kinds)
        .expect("the OpKind list")[1]
        .to_owned();
    let op_kinds: Vec<String> = regex::Regex::new(r"(\w+) = ")
        .unwrap()
        .captures_iter(&op_kinds)
        .map(|c| c[1].to_owned())
        .collect();
    let api = std::fs::read_to_string(root.join("proto/api/src/agent.rs")).unwrap();
    let calls: Vec<String> = variants(&api, "ControllerOpKind")
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    // The answers of one kind of operation: the reports that carry an operation's id,
    // but for its failure, which the engine takes for every kind.
    let answers: Vec<String> = variants(&api, "Report")
        .into_iter()
        .filter(|(v, fields)| fields.contains("op: u64") && v != "OpError")
        .map(|(v, _)| v)
        .collect();
    assert!(
        op_kinds.len() >= 10 && calls.len() == op_kinds.len() && answers.len() >= 8,
        "the kinds were not read: {op_kinds:?} {calls:?} {answers:?}"
    );
    let mut named: Vec<String> = Vec::new();
    for (ty, list) in [
        ("OpKind", &op_kinds),
        ("ControllerOpKind", &calls),
        ("Report", &answers),
    ] {
        for v in list {
            let needle = regex::Regex::new(&format!(r"\b{ty}::{v}\b")).unwrap();
            if needle.is_match(&engine) {
                named.push(format!("{ty}::{v}"));
            }
        }
    }
    let graph = import_graph(&root.join("server/src/lifecycle"), "crate::lifecycle");
    let imports: Vec<&String> = graph["ops/queue.rs"]
        .iter()
        .filter(|f| *f != "backoff.rs" && *f != "events.rs" && *f != "settings.rs")
        .collect();
    assert!(
        named.is_empty() && imports.is_empty(),
        "{engine_file} names kinds of operations ({}) or imports a lifecycle file beyond \
         the event log, the settings and the backoff ({imports:?}): a kind plugs in through \
         `queue::Kind` in its file of ops/kinds/ and a row of `kinds::of`",
        named.join(", ")
    );
}

#[test]
fn the_agent_runs_each_kind_of_controller_operation_from_its_own_file() {
    // The agent's controller side is a table (`ControllerPlugin::run`, one row per kind)
    // over one file per kind that makes its CSI calls, as the server's queue is over its
    // kinds: a new kind is a file and a row.
    let root = root();
    let api = std::fs::read_to_string(root.join("proto/api/src/agent.rs")).unwrap();
    let calls: Vec<String> = variants(&api, "ControllerOpKind")
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    assert!(calls.len() >= 10, "the kinds were not read: {calls:?}");
    let table_file = "agent/src/plugin/controller.rs";
    let table = code_of(
        &std::fs::read_to_string(root.join(table_file))
            .unwrap_or_else(|e| panic!("{table_file}: {e}")),
    );
    let kinds_dir = root.join("agent/src/plugin/controller");
    let files: Vec<(String, String)> = sources(&kinds_dir)
        .into_iter()
        .map(|p| {
            let name = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, code_of(&std::fs::read_to_string(&p).unwrap()))
        })
        .collect();
    let mut wrong = Vec::new();
    for v in &calls {
        let needle = regex::Regex::new(&format!(r"\bControllerOpKind::{v}\b")).unwrap();
        let rows = needle.find_iter(&table).count();
        let holders: Vec<&str> = files
            .iter()
            .filter(|(_, code)| needle.is_match(code))
            .map(|(name, _)| name.as_str())
            .collect();
        if rows != 1 || holders.len() != 1 {
            wrong.push(format!(
                "{v}: {rows} row(s) in {table_file}, named by {holders:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "each kind of controller operation is one row of the table in {table_file} and one \
         file of agent/src/plugin/controller/:\n{}",
        wrong.join("\n")
    );
}
