//! The product speaks of itself: no file of the project names an issue, a branch, a commit
//! hash or a run's session and machine load. Those belong to the git log; a reader of the
//! docs, the code or the program's output cannot act on them.

use std::path::{Path, PathBuf};

use regex::Regex;

/// What planning talk looks like, each with why it is refused.
const PATTERNS: &[(&str, &str)] = &[
    (r"(?i)\bissues? ?#?\d+", "an issue number"),
    (r"(?i)\bissue\d+-[a-z]", "a branch name"),
    (r"(?i)\bthis branch\b|\bbranch `", "a branch"),
    (
        r"(?i)\b(commit|build of|binaries of) [0-9a-f]{7,40}\b",
        "a commit hash",
    ),
    (r"(?i)\brebased\b", "the history of a branch"),
    (
        r"\b\d\d:\d\d[–-]\d\d:\d\d UTC\b|(?i)\bone session\b|\bother agents (building|of the machine)",
        "a run diary",
    ),
];

/// The repository's own files: everything but the build output, git's store and the lock
/// file (whose hashes are data), and this file, which spells the patterns out.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && name != ".git" {
                files(&path, out);
            }
        } else if name != "Cargo.lock" && !path.ends_with("tests/tests/it/product_text.rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_file_speaks_of_issues_branches_or_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut all = Vec::new();
    files(root, &mut all);
    assert!(
        all.len() > 100,
        "found only {} files under {}",
        all.len(),
        root.display()
    );
    let patterns: Vec<(Regex, &str)> = PATTERNS
        .iter()
        .map(|(p, why)| (Regex::new(p).unwrap(), *why))
        .collect();
    let mut found = Vec::new();
    for path in &all {
        // Text files only: a binary file holds no prose.
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for (re, why) in &patterns {
                if let Some(m) = re.find(line) {
                    found.push(format!(
                        "{}:{}: {why}: `{}`",
                        path.strip_prefix(root).unwrap().display(),
                        n + 1,
                        m.as_str()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "say what csivol does and why, not how it was planned (the git log keeps that):\n{}",
        found.join("\n")
    );
}
