//! What a Rust source file imports, read from its text: the import graph of a module
//! tree, its circles, and the files a file reaches. The lifecycle's structure and the
//! server crate's are tested over it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{root, sources};

/// The code of a Rust file without its comments, string and character literals and
/// visibilities (`pub(super)` names no module it uses), and without a `#[cfg(test)]`
/// module at its end: what it imports, not what it says.
pub(super) fn code_of(text: &str) -> String {
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
pub(super) fn use_paths(code: &str) -> Vec<String> {
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
/// `dir/mod.rs`, or the crate root `dir/lib.rs` when `root_path` is `crate`, named
/// `root_path` from the crate root, e.g. `crate::lifecycle`), its tests left out (a
/// `tests/` folder or a `tests.rs` file, the room of the module that declares them, and a
/// crate's `main.rs`, a crate of its own): for each file (relative to `dir`), the files of
/// the tree its `use` declarations and the paths in its code (`super::x::y`,
/// `crate::lifecycle::x`, a child module's `x::y`, a module it imported by name's `x::y`)
/// name, each resolved to the deepest file the path reaches. A folder's `mod.rs` is the
/// module the folder is.
pub(super) fn import_graph(dir: &Path, root_path: &str) -> BTreeMap<String, BTreeSet<String>> {
    let tests = regex::Regex::new(r"(^|/)tests(/|\.rs$)").unwrap();
    let crate_root = root_path == "crate";
    let files: Vec<String> = sources(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
        .filter(|p| !tests.is_match(p))
        .filter(|p| !(crate_root && (p == "main.rs" || p.starts_with("bin/"))))
        .collect();
    let root_file = if crate_root { "lib.rs" } else { "mod.rs" };
    // A module path (`["ops", "queue"]`) and the file that holds it.
    let module_of = |file: &str| -> Vec<String> {
        if file == root_file {
            return Vec::new();
        }
        let stem = file.trim_end_matches(".rs");
        let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    };
    let file_of = |module: &[String]| -> Option<String> {
        if module.is_empty() {
            return Some(root_file.to_owned());
        }
        let joined = module.join("/");
        [format!("{joined}.rs"), format!("{joined}/mod.rs")]
            .into_iter()
            .find(|f| files.contains(f))
    };
    // The module a path names (the deepest one that is a file of the tree), and whether
    // the whole path is modules; `None` for a path outside the tree.
    let resolve = |path: &str,
                   here: &[String],
                   named: &BTreeMap<String, Vec<String>>|
     -> Option<(Vec<String>, bool)> {
        let mut segments: Vec<&str> = path.split("::").map(str::trim).collect();
        let mut module: Vec<String> = match segments.first() {
            Some(&"crate") => {
                let root: Vec<&str> = root_path.split("::").collect();
                if !segments.starts_with(&root) {
                    return None;
                }
                segments.drain(..root.len());
                Vec::new()
            }
            Some(&"self") => {
                segments.remove(0);
                here.to_vec()
            }
            Some(&"super") => {
                let mut m = here.to_vec();
                while segments.first() == Some(&"super") {
                    segments.remove(0);
                    // Above the tree's root: another part of the crate.
                    m.pop()?;
                }
                m
            }
            // A module this file imported by its name (`use crate::store::sqlite;`, then
            // `sqlite::backup::verify`).
            Some(first) if named.contains_key(*first) => {
                let m = named[*first].clone();
                segments.remove(0);
                m
            }
            // A child module of this one, by its name (`use queue::schedule;` in a
            // folder's mod.rs); any other name is another crate's or an item's.
            Some(first) => {
                let mut child = here.to_vec();
                child.push((*first).to_owned());
                file_of(&child)?;
                here.to_vec()
            }
            None => return None,
        };
        let mut whole = true;
        for s in segments {
            module.push(s.to_owned());
            if file_of(&module).is_none() {
                module.pop();
                whole = false;
                break;
            }
        }
        Some((module, whole))
    };
    let inline = regex::Regex::new(r"\b[a-z_][a-z0-9_]*(?:::\w+)+").unwrap();
    let mut graph = BTreeMap::new();
    for file in &files {
        let code = code_of(&std::fs::read_to_string(dir.join(file)).unwrap());
        let here = module_of(file);
        let mut named = BTreeMap::new();
        let mut modules = Vec::new();
        for path in use_paths(&code) {
            // `use crate::store::{self, Snapshot};` imports `store` by its name.
            let path = path.strip_suffix("::self").unwrap_or(&path);
            if let Some((module, whole)) = resolve(path, &here, &BTreeMap::new()) {
                if whole && let Some(name) = module.last() {
                    named.insert(name.clone(), module.clone());
                }
                modules.push(module);
            }
        }
        modules.extend(
            inline
                .find_iter(&code)
                .filter_map(|m| resolve(m.as_str(), &here, &named))
                .map(|(module, _)| module),
        );
        let arrows: BTreeSet<String> = modules
            .iter()
            .filter_map(|m| file_of(m))
            .filter(|target| target != file)
            .collect();
        graph.insert(file.clone(), arrows);
    }
    graph
}

/// The import circles of `graph`: each set of files that import one another (Tarjan's
/// strongly connected components of more than one file), with the arrows inside it.
pub(super) fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
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
pub(super) fn reached(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(f) = todo.pop() {
        if seen.insert(f.clone()) {
            todo.extend(graph.get(&f).into_iter().flatten().cloned());
        }
    }
    seen
}

#[test]
fn the_server_crate_has_no_import_circle() {
    // Imports run one way: the command line and the assembly on top, the shared state,
    // HTTP and the lifecycle below them, the store under those, shared constants at the
    // bottom. A file that imports one that imports it back ties two jobs into one: a
    // change to either moves both, and neither can be read or tested alone.
    let graph = import_graph(&root().join("server/src"), "crate");
    assert!(
        graph.len() > 100 && graph.values().map(|a| a.len()).sum::<usize>() > 500,
        "the server crate's imports were not read: {graph:?}"
    );
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "server/src/ has import circles (move what both files need below both, or make \
         the lower one take plain values instead of the upper one's types):\n{}",
        found
            .iter()
            .map(|c| c.join("\n  "))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}
