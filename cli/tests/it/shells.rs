//! The generated completion scripts loaded into the real bash, zsh and fish, completing
//! volume and node names from a real server at every position the name table lists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use csivol::commands::completions::{NAME_ARGUMENTS, NAME_LISTS, NAME_OPTIONS, Names};

use crate::support::{Env, Run, run};

const INSTALL: &str = "apt-get install -y zsh fish (as `.ci/run` does)";

const VOLUMES: &[&str] = &["data-1", "data-2"];
/// The one file in the shell's working directory.
const FILE: &str = "notes.toml";
const NODES: &[&str] = &["node-1"];
const POOLS: &[&str] = &["cache-pool"];
const NAMESPACES: &[&str] = &["team-a"];

#[derive(Clone, Copy, Debug)]
enum Sh {
    Bash,
    Zsh,
    Fish,
}

impl Sh {
    fn name(self) -> &'static str {
        match self {
            Sh::Bash => "bash",
            Sh::Zsh => "zsh",
            Sh::Fish => "fish",
        }
    }
}

/// A server with volumes and a node, and the completion scripts `csivol completions`
/// prints for it.
struct Setup {
    env: Env,
    /// The shell runs here; it holds one file, [`FILE`], which only a file argument offers.
    cwd: PathBuf,
    /// `csivol.bash`, `_csivol` (alone, as zsh's fpath wants it) and `csivol.fish`.
    scripts: PathBuf,
    _node: csivol_tests::FakeAgent,
}

impl Setup {
    async fn start(name: &str) -> Self {
        let env = Env::start(name);
        for v in VOLUMES.iter().chain(&["other"]) {
            env.volume(v, "single-node-writer").await;
        }
        let node = env.node(NODES[0], 0).await;
        for p in POOLS {
            let (status, body) = env
                .api()
                .put(
                    &format!("/v1/pools/{p}"),
                    serde_json::json!({"selector": {"pool": p}}),
                )
                .await;
            assert_eq!(status, 201, "{body}");
        }
        for n in NAMESPACES {
            let (status, body) = env
                .api()
                .put(&format!("/v1/namespaces/{n}"), serde_json::json!({}))
                .await;
            assert_eq!(status, 201, "{body}");
        }
        let cwd = env.dir.join("cwd");
        let scripts = env.dir.join("scripts");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::write(cwd.join(FILE), "").unwrap();
        std::fs::create_dir_all(&scripts).unwrap();
        for (shell, file) in [
            ("bash", "csivol.bash"),
            ("zsh", "_csivol"),
            ("fish", "csivol.fish"),
        ] {
            let r = env.run(&["completions", shell]).await;
            assert_eq!(r.code, 0, "{r}");
            std::fs::write(scripts.join(file), r.stdout).unwrap();
        }
        Self {
            env,
            cwd,
            scripts,
            _node: node,
        }
    }

    /// What `shell` offers when Tab is pressed at the end of `line`.
    async fn complete(&self, shell: Sh, line: &str) -> BTreeSet<String> {
        let script = match shell {
            Sh::Bash => bash_harness(&self.scripts.join("csivol.bash"), line),
            Sh::Zsh => {
                let setup = self.env.dir.join("zsh-setup.zsh");
                std::fs::write(&setup, ZSH_SETUP).unwrap();
                zsh_harness(&self.scripts, &setup, line)
            }
            Sh::Fish => format!(
                "source {}; complete -C {}",
                self.scripts.join("csivol.fish").display(),
                quote(line)
            ),
        };
        let r = self.shell(shell, &script).await;
        assert_eq!(r.code, 0, "{} completing {line:?}: {r}", shell.name());
        r.stdout
            .lines()
            // fish: "candidate<TAB>description"
            .map(|l| l.split('\t').next().unwrap().trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// Runs `script` in `shell` with the server's address and token, and `csivol` on PATH.
    async fn shell(&self, shell: Sh, script: &str) -> Run {
        let csivol = self.env.command(&[]);
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_csivol")).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = tokio::process::Command::new(shell.name());
        match shell {
            Sh::Bash => cmd.args(["--norc", "--noprofile", "-c", script]),
            Sh::Zsh => cmd.args(["-f", "-c", script]),
            Sh::Fish => cmd.args(["--no-config", "-c", script]),
        };
        cmd.envs(
            csivol
                .as_std()
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k, v))),
        )
        .env("PATH", path)
        .env("TERM", "dumb")
        .current_dir(&self.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
        run(cmd).await
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// bash: the words and the cursor as bash's programmable completion sets them, then the
/// function the script registers for `csivol`.
fn bash_harness(script: &Path, line: &str) -> String {
    let mut words: Vec<&str> = line.split(' ').collect();
    if words.is_empty() {
        words.push("");
    }
    let quoted: Vec<String> = words.iter().map(|w| quote(w)).collect();
    format!(
        "source {script}; COMP_LINE={line}; COMP_POINT=${{#COMP_LINE}}; \
         COMP_WORDS=({words}); COMP_CWORD={cword}; \
         $(complete -p csivol | sed -E 's/.* -F ([^ ]+) .*/\\1/') csivol {cur} {prev}; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script.display(),
        line = quote(line),
        words = quoted.join(" "),
        cword = words.len() - 1,
        cur = quoted[words.len() - 1],
        prev = quoted[words.len().saturating_sub(2)],
    )
}

/// zsh completes only inside its line editor, which needs a terminal: an interactive
/// `zsh -f -i` on a zsh/zpty pseudo-terminal loads `_csivol` through compinit as an
/// installed one is loaded, gets the line and a Tab, and prints each match that
/// completion adds (through a `compadd` that reports before it adds).
fn zsh_harness(fpath: &Path, setup: &Path, line: &str) -> String {
    format!(
        r#"zmodload zsh/zpty || exit 3
zpty z 'FPATH_DIR={fpath} zsh -f -i' || exit 3
zpty -w z 'source {setup}'
while zpty -r z out; do [[ $out == *@ready* ]] && break; done
zpty -w -n z {line}$'\t'
while zpty -r z out; do
    out=${{out%$'\r'}}
    case $out in
        (*@done*) break ;;
        (*@hit\ *) print -r -- "${{out#*@hit }}" ;;
    esac
done
zpty -d z
"#,
        fpath = quote(&fpath.display().to_string()),
        setup = setup.display(),
        line = quote(line),
    )
}

/// Sourced by the interactive zsh of [`zsh_harness`].
const ZSH_SETUP: &str = r#"
PROMPT='' RPROMPT=''
fpath=("$FPATH_DIR" $fpath)
autoload -Uz compinit && compinit -u -D
zstyle ':completion:*' insert-tab false
# Never run the line, only complete it.
bindkey '^M' undefined-key
bindkey '^J' undefined-key
bindkey '^I' complete-word
# compadd -O/-A/-D only fill arrays (matching, not adding); every other call adds.
compadd() {
    if [[ " ${@[1,(i)(-|--)]} " == *\ -[OAD]\ * ]]; then
        builtin compadd "$@"
        return
    fi
    local -a __added
    builtin compadd -A __added "$@"
    local m
    for m in $__added; do print -r -- "@hit $m"; done
    builtin compadd "$@"
}
__csivol_test_done() { print -r -- '@done'; exit }
comppostfuncs=(__csivol_test_done)
print -r -- '@ready'
"#;

fn names(kind: Names) -> &'static [&'static str] {
    match kind {
        Names::Volumes => VOLUMES,
        Names::Nodes => NODES,
        Names::Pools => POOLS,
        Names::Namespaces => NAMESPACES,
    }
}

fn other(kind: Names) -> Names {
    match kind {
        Names::Volumes => Names::Nodes,
        Names::Nodes => Names::Volumes,
        Names::Pools => Names::Volumes,
        Names::Namespaces => Names::Volumes,
    }
}

/// Every position of the name table, in each shell: the names of its kind are offered,
/// the other kind's are not; elsewhere no name is offered.
async fn check(shell: Sh) {
    if let Err(e) = std::process::Command::new(shell.name())
        .arg("--version")
        .output()
    {
        panic!(
            "cannot run {}: {e}; the completion tests need bash, zsh and fish: {INSTALL}",
            shell.name()
        );
    }
    let s = Setup::start(&format!("complete-{}", shell.name())).await;
    let mut cases: Vec<(String, Option<Names>)> = Vec::new();
    for (command, kind) in NAME_ARGUMENTS {
        cases.push((format!("csivol {command} "), Some(*kind)));
    }
    // `events` takes both options.
    for (option, kind) in NAME_OPTIONS {
        cases.push((format!("csivol events {option} "), Some(*kind)));
    }
    for (command, kind) in NAME_LISTS {
        // Every word up to `--` is a name, whatever flags come between; not the value of
        // an option.
        let (flag, option) = match *command {
            "run" => ("--queue", "--alloc"),
            "snapshot create" => ("--wait", "--group"),
            other => panic!("which flag and option of `{other}` to try"),
        };
        cases.push((format!("csivol {command} "), Some(*kind)));
        cases.push((format!("csivol {command} data-1 "), Some(*kind)));
        cases.push((format!("csivol {command} data-1 {flag} "), Some(*kind)));
        cases.push((format!("csivol {command} data-1 {option} "), None));
        cases.push((format!("csivol {command} data-1 -o "), None));
        cases.push((format!("csivol {command} data-1 -- "), None));
        cases.push((format!("csivol {command} data-1 -- sh "), None));
    }
    cases.push(("csivol claim data-1 --node ".into(), Some(Names::Nodes)));
    cases.push(("csivol volume list --node ".into(), Some(Names::Nodes)));
    cases.push(("csivol volume list ".into(), None));
    cases.push(("csivol claim data-1 ".into(), None));
    cases.push(("csivol node list ".into(), None));
    assert!(cases.len() > 15);
    for (line, kind) in cases {
        let got = s.complete(shell, &line).await;
        let has = |n: &&str| got.contains(*n);
        match kind {
            Some(kind) => {
                assert!(
                    names(kind).iter().all(has) && !names(other(kind)).iter().any(has),
                    "{}: {line:?} offers {got:?}, wants the {} {:?}",
                    shell.name(),
                    kind.arg(),
                    names(kind)
                );
            }
            None => assert!(
                !VOLUMES
                    .iter()
                    .chain(NODES)
                    .chain(POOLS)
                    .chain(NAMESPACES)
                    .any(has),
                "{}: {line:?} offers names: {got:?}",
                shell.name()
            ),
        }
    }
    // A value that is not a path is not completed from file names; a spec file is.
    for line in [
        "csivol claim data-1 --node node-1 --alloc ",
        "csivol run data-1 --alloc ",
        "csivol unblock data-1 --reason ",
        "csivol claim data-1 --ttl ",
    ] {
        let got = s.complete(shell, line).await;
        assert!(
            !got.contains(FILE),
            "{}: {line:?} offers {got:?}",
            shell.name()
        );
    }
    let got = s.complete(shell, "csivol status --ca-cert ").await;
    assert!(got.contains(FILE), "{}: offers {got:?}", shell.name());
    // What the completion scripts run is no command to offer.
    for line in ["csivol ", "csivol _"] {
        let got = s.complete(shell, line).await;
        assert!(
            !got.iter().any(|w| w.starts_with("__")),
            "{}: {line:?} offers {got:?}",
            shell.name()
        );
    }
    // A prefix picks among the names.
    for (line, want) in [
        ("csivol volume show da", &["data-1", "data-2"][..]),
        ("csivol node drain no", &["node-1"][..]),
        ("csivol unblock --node no", &["node-1"][..]),
    ] {
        let got = s.complete(shell, line).await;
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want, "{}: {line:?}", shell.name());
    }
}

#[tokio::test]
async fn bash_completes_names_at_every_position() {
    check(Sh::Bash).await;
}

#[tokio::test]
async fn zsh_completes_names_at_every_position() {
    check(Sh::Zsh).await;
}

#[tokio::test]
async fn fish_completes_names_at_every_position() {
    check(Sh::Fish).await;
}
