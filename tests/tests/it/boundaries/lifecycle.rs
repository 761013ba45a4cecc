//! The lifecycle's structure: no import circle inside `server/src/lifecycle/`, admission
//! below the claims and the attachments, a controller-operation queue that names no kind
//! of operation, and each kind of controller operation a file and a row on both sides.

use std::path::Path;

use super::{root, sources};

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
    let ops = std::fs::read_to_string(root.join("proto/api/src/controller_ops.rs")).unwrap();
    let calls: Vec<String> = variants(&ops, "ControllerOpKind")
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    let api = std::fs::read_to_string(root.join("proto/api/src/agent.rs")).unwrap();
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
    let api = std::fs::read_to_string(root.join("proto/api/src/controller_ops.rs")).unwrap();
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
