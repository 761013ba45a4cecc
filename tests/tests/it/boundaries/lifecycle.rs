//! The lifecycle's structure: no import circle inside `server/src/lifecycle/`, admission
//! below the claims and the attachments, a controller-operation queue that names no kind
//! of operation, and each kind of controller operation a file and a row on both sides.

use super::imports::{circles, code_of, import_graph, reached};
use super::{root, sources};

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
