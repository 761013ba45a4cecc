//! Names that say what they hold: the node agent's decisions in their own folder of
//! `csivol-rules`, imported by their real path, and one word per idea as ARCHITECTURE.md's
//! glossary writes it. Each test names what crossed the line and where it belongs.

use std::collections::BTreeMap;
use std::path::Path;

use super::{root, sources};

/// A file's code without its comments (`//` to the end of the line, doc comments
/// included), line by line, with the line numbers of the file.
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            (
                n + 1,
                line.split("//").next().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `path` relative to the workspace root, for messages.
fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Whether `code` holds `word` as a whole identifier path segment: not inside a longer
/// identifier (`plan` is not in `planned`).
fn names(code: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// The node agent's facts: what it recorded in `agent.db`, what it observed of a plugin's
/// mounts, and the node's desired state. A decision that reads one of them is the agent's.
const AGENT_FACTS: &[&str] = &[
    "StagingRecord",
    "PublicationRecord",
    "Observation",
    "DesiredPublish",
    "DesiredUnpublish",
    "DesiredState",
];

#[test]
fn the_agents_decisions_live_in_their_folder() {
    let rules = root().join("rules/src");
    let agent = rules.join("agent");
    let mut found = Vec::new();
    for path in sources(&rules) {
        let theirs = path.starts_with(&agent);
        let before = found.len();
        for (n, code) in code_lines(&path) {
            if found.len() > before {
                break; // the first line of a file says enough
            }
            if !theirs {
                // The server's rules decide over the cluster's state; the node's desired
                // state and the agent's records are the agent's decisions' facts.
                if let Some(fact) = AGENT_FACTS.iter().find(|f| names(&code, f)) {
                    found.push(format!(
                        "{}:{n}: a decision over the agent's `{fact}` belongs in rules/src/agent/: {}",
                        rel(&path),
                        code.trim()
                    ));
                }
                if names(&code, "crate::agent") {
                    found.push(format!(
                        "{}:{n}: the server's rules read none of the agent's decisions: {}",
                        rel(&path),
                        code.trim()
                    ));
                }
            } else if code.contains("crate::") && !code.contains("crate::agent") {
                found.push(format!(
                    "{}:{n}: the agent's decisions read none of the server's rules: {}",
                    rel(&path),
                    code.trim()
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The modules of the folder `dir` (its `X.rs` files and `X/` folders, `mod.rs` aside),
/// each with the siblings its code (and its folder's) imports.
fn sibling_imports(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let mut modules: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if stem == "mod" || stem == "lib" {
            continue;
        }
        if path.is_dir() {
            modules.entry(stem).or_default().extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            modules.entry(stem).or_default().push(path);
        }
    }
    let siblings: Vec<String> = modules.keys().cloned().collect();
    modules
        .into_iter()
        .map(|(name, files)| {
            let code: String = files
                .iter()
                .flat_map(|f| code_lines(f))
                .map(|(_, line)| line + "\n")
                .collect();
            let uses = siblings
                .iter()
                .filter(|s| **s != name)
                .filter(|s| {
                    // `super::s` from the module's file, `super::super::s` from a file of
                    // its folder; `use super::{s, ..}` names it inside braces.
                    names(&code, &format!("super::{s}"))
                        || code
                            .split("super::{")
                            .skip(1)
                            .any(|rest| names(rest.split('}').next().unwrap_or_default(), s))
                })
                .cloned()
                .collect();
            (name, uses)
        })
        .collect()
}

/// An import circle among `graph`'s modules, as the modules it passes through.
fn circle(graph: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, Vec<String>>,
        at: &str,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        if done.iter().any(|d| d == at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.push(at.to_owned());
        None
    }
    let mut done = Vec::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

#[test]
fn the_agents_decisions_import_one_way() {
    let graph = sibling_imports(&root().join("rules/src/agent"));
    for module in ["job", "verify", "records", "observed"] {
        assert!(
            graph.contains_key(module),
            "rules/src/agent/ has no `{module}`: {graph:?}"
        );
    }
    assert_eq!(
        circle(&graph),
        None,
        "rules/src/agent/ imports in a circle: move what both sides read to a module of its own (as `records` holds the record types)"
    );
}

#[test]
fn the_agent_imports_the_decisions_by_their_real_path() {
    let mut found = Vec::new();
    let lib = root().join("agent/src/lib.rs");
    for path in sources(&root().join("agent/src")) {
        for (n, code) in code_lines(&path) {
            let Some(rest) = code.trim_start().strip_prefix("pub") else {
                continue;
            };
            // `pub use`, `pub(crate) use`, `pub(super) use`.
            let rest = match rest.strip_prefix('(') {
                Some(scoped) => scoped.split_once(')').map_or("", |(_, r)| r),
                None => rest,
            };
            let Some(used) = rest.trim_start().strip_prefix("use ") else {
                continue;
            };
            let used = used.trim();
            let own = ["self::", "crate::", "super::"]
                .iter()
                .any(|p| used.starts_with(p));
            if (path == lib && !own) || names(used, "csivol_rules") {
                found.push(format!("{}:{n}: {}", rel(&path), code.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the node agent re-exports another crate's names, so that a `crate::` path names code \
         that is not the agent's: import them where they are used, by their real path \
         (`csivol_rules::agent::...`):\n{}",
        found.join("\n")
    );
}

/// One word per idea (ARCHITECTURE.md's glossary): each word, the folders whose code must
/// not use it as a name, and what they call their idea instead.
const WORDS: &[(&str, &[&str], &str)] = &[
    (
        "reconcile",
        &["agent/src", "agent/tests"],
        "reconciliation is controller-side only (a controller's listing against csivol's \
         attachments, whose agent half is `engine/listing.rs`); what makes the node follow \
         its desired state is the node `engine`",
    ),
    (
        "Reconciler",
        &["agent/src", "agent/tests"],
        "the node engine's loop is its `Driver`",
    ),
    (
        "PluginChannel",
        &["proto", "agent", "hostpath", "tests", "server/src"],
        "a channel is the node channel (server and agent); a plugin is reached through its \
         `PluginConnection`",
    ),
    (
        "channel",
        &["proto/src", "agent/src/plugin.rs", "agent/src/check"],
        "a channel is the node channel (server and agent); a plugin is reached through its \
         connection (`CsiEndpoint::connection`)",
    ),
    (
        "plan",
        &["rules/src", "agent/src"],
        "a plan is what an operator action would do (`ActionPlan`, the CLI's `plan`); the node \
         agent decides a volume's `job` and its recovery's `repairs`",
    ),
    (
        "Plan",
        &["rules/src", "agent/src"],
        "a plan is what an operator action would do (`ActionPlan`); the node agent's \
         recovery decides `Repairs`",
    ),
];

#[test]
fn one_word_per_idea() {
    let mut found = Vec::new();
    for (word, dirs, instead) in WORDS {
        for dir in *dirs {
            let at = root().join(dir);
            let files = if at.is_file() {
                vec![at.clone()]
            } else {
                sources(&at)
            };
            // This file spells the words out.
            for path in files
                .into_iter()
                .filter(|p| !p.ends_with("boundaries/names.rs"))
            {
                let named = path
                    .strip_prefix(&at)
                    .unwrap()
                    .with_extension("")
                    .components()
                    .any(|c| c.as_os_str() == *word);
                let mut hit = named.then(|| "its path".to_owned());
                if hit.is_none() {
                    hit = code_lines(&path)
                        .into_iter()
                        .find(|(_, code)| names(code, word))
                        .map(|(n, code)| format!("line {n}: {}", code.trim()));
                }
                if let Some(hit) = hit {
                    found.push(format!("{}: `{word}` ({hit}): {instead}", rel(&path)));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn domain_names_the_api_types_alone() {
    // csivol's own types for what it needs from CSI are `csivol_api::domain`; what turns
    // the generated wire types into them and back is `csivol_csi::convert`.
    let own = root().join("proto/api/src/domain.rs");
    let declared = root().join("proto/api/src/lib.rs");
    let mut found = Vec::new();
    for dir in [
        "proto", "agent", "server", "cli", "hostpath", "rules", "daemon", "tests", "gen",
    ] {
        for path in sources(&root().join(dir)) {
            if path.ends_with("boundaries/names.rs") {
                continue; // this file spells the names out
            }
            if path.file_stem().is_some_and(|s| s == "domain") && path != own {
                found.push(format!("{}: a second module called `domain`", rel(&path)));
            }
            for (n, code) in code_lines(&path) {
                let declares = names(&code, "mod domain") && path != declared;
                if declares || names(&code, "csivol_csi::domain") {
                    found.push(format!("{}:{n}: {}", rel(&path), code.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "`domain` is csivol_api's plain CSI types; conversions are `csivol_csi::convert`:\n{}",
        found.join("\n")
    );
}
