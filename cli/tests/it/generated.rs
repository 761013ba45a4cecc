//! The checked-in completions and man pages are what the clap definitions generate now.

use std::fs;
use std::path::{Path, PathBuf};

use csivol_tests::TestDir;

use crate::support::run;

const UPDATE: &str = "cargo run -p csivol --bin csivol-gen -- --out .";

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for sub in ["completions", "man"] {
        let Ok(entries) = fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            out.push((
                Path::new(sub).join(e.file_name()),
                fs::read(e.path()).unwrap(),
            ));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn completions_and_man_pages_are_fresh() {
    let dir = TestDir::new("cli-generated");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_csivol-gen"));
    cmd.arg("--out")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let r = run(cmd).await;
    assert_eq!(r.code, 0, "{r}");

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fresh = files(dir.path());
    let checked_in = files(&root);
    assert!(fresh.len() > 10, "generated too little: {:?}", fresh.len());
    let names = |v: &[(PathBuf, Vec<u8>)]| v.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&checked_in),
        names(&fresh),
        "completions/ or man/ have other files than the CLI generates; run `{UPDATE}` at the repository root"
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
    let man = Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
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
