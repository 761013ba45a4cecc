//! The checked-in completions and man pages are what every program's clap definitions
//! generate now.

use std::fs;
use std::path::{Path, PathBuf};

use csivol_tests::TestDir;

const UPDATE: &str = "cargo run -p csivol-gen -- --out .";

/// Every file below `completions/` and `man/`, by its path from `root`.
fn files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_owned();
                out.push((rel, fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    for sub in ["completions", "man"] {
        walk(root, &root.join(sub), &mut out);
    }
    out.sort();
    out
}

#[test]
fn completions_and_man_pages_are_fresh() {
    let dir = TestDir::new("generated");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_csivol-gen"))
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fresh = files(dir.path());
    let checked_in = files(&root);
    assert!(fresh.len() > 10, "generated too little: {:?}", fresh.len());
    let names = |v: &[(PathBuf, Vec<u8>)]| v.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&checked_in),
        names(&fresh),
        "completions/ or man/ have other files than the programs generate; run `{UPDATE}` at the repository root"
    );
    for ((path, have), (_, want)) in checked_in.iter().zip(&fresh) {
        assert!(
            have == want,
            "{} is stale; run `{UPDATE}` at the repository root",
            path.display()
        );
    }
}

#[test]
fn man_pages_have_examples() {
    let man = Path::new(env!("CARGO_MANIFEST_DIR")).join("../man/csivol");
    for page in [
        "csivol.1",
        "csivol-claim.1",
        "csivol-node-drain.1",
        "csivol-status.1",
    ] {
        let text = fs::read_to_string(man.join(page)).unwrap();
        let examples = text
            .find(".SH EXAMPLES")
            .unwrap_or_else(|| panic!("{page}: no EXAMPLES"));
        assert!(text[examples..].contains("csivol "), "{page}");
    }
}

/// Every program has its man page, and each daemon's says how it exits and what it reads.
#[test]
fn every_program_has_a_man_page() {
    let man = Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
    for page in [
        "csivol/csivol.1",
        "csivol-server/csivol-server.1",
        "csivol-server/csivol-server-serve.1",
        "csivol-server/csivol-server-dev.1",
        "csivol-server/csivol-server-tls-init.1",
        "csivol-agent/csivol-agent.1",
        "csivol-agent/csivol-agent-run.1",
        "csivol-hostpath/csivol-hostpath.1",
    ] {
        let text = fs::read_to_string(man.join(page))
            .unwrap_or_else(|e| panic!("man/{page}: {e}; run `{UPDATE}`"));
        assert!(text.contains(".SH \"EXIT STATUS\""), "{page}");
    }
    for page in [
        "csivol-server/csivol-server.1",
        "csivol-agent/csivol-agent.1",
    ] {
        let text = fs::read_to_string(man.join(page)).unwrap();
        assert!(
            text.contains(".SH FILES") && text.contains("/etc/csivol/"),
            "{page}"
        );
    }
    // The agent's hidden spellings of moved commands get no page.
    assert!(!man.join("csivol-agent/csivol-agent-server.1").exists());
}
