//! The docs' console examples, run against a real dev cluster: README.md's tour,
//! docs/getting-started.md and docs/ci.md. Each page gets a fresh dev cluster of two nodes;
//! each `$ COMMAND` line of a ```console block runs in bash (with the dev cluster's env file
//! sourced first, and stderr into stdout, as a terminal shows both) from the directory that
//! holds `csivol-dev/`, and what it prints must be the lines below it in the page.
//!
//! Both sides are filtered the same way before they are compared: times, ages, token and
//! volume ids, ports and event indexes become placeholders, the dev dir is shown as
//! `/home/me/csivol-dev`, and runs of spaces (table padding, which follows the widths of what
//! was filtered) become two. A line `...` in a page stands for any lines (snapbox's
//! wildcard, as in trycmd), for output that varies from run to run, such as progress lines.
//! A command with a `# after ...` or `# within ...` comment waits for something that takes
//! time (a heartbeat TTL): it is run again until its output matches, within two minutes.

use std::path::Path;
use std::time::{Duration, Instant};

use csivol_tests::{ServerProc, TestDir, wait_for};
use regex::Regex;
use snapbox::Assert;

use crate::cluster::Out;
use crate::dev::{Dev, free_port, interrupt};

/// One `$ COMMAND` of a console block and the output the page shows for it.
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    expected: String,
    /// Run again until it matches (a `# after` / `# within` comment).
    waits: bool,
}

/// The steps of every ```console block of a page, in order.
fn steps(page: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_console = false;
    for (n, line) in page.lines().enumerate() {
        if line.starts_with("```") {
            in_console = line.trim() == "```console";
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            let waits = command.contains("# after ") || command.contains("# within ");
            steps.push(Step {
                line: n + 1,
                command: command.to_owned(),
                expected: String::new(),
                waits,
            });
        } else if let Some(step) = steps.last_mut() {
            step.expected.push_str(line);
            step.expected.push('\n');
        }
    }
    for s in &mut steps {
        // The blank line between one command's output and the next command is the page's.
        let trimmed = s.expected.trim_end().len();
        s.expected.truncate(trimmed);
    }
    steps
}

/// The page's and the program's text, alike in what changes from run to run.
struct Filters {
    dev_dir: String,
    rules: Vec<(Regex, &'static str)>,
}

impl Filters {
    fn new(dev_dir: &Path) -> Self {
        let rules = [
            (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]"),
            (r"\(\d+[smhd](\d+[smh])? ago\)", "([AGE] ago)"),
            (r"\b(operator|claimer|reader):[0-9a-f]{12}\b", "$1:[ID]"),
            (r"\btoken [0-9a-f]{12}\b", "token [ID]"),
            (r"\bhostpath-\d{6}\b", "hostpath-[ID]"),
            (r"\brun-[0-9a-f]{16}\b", "run-[ID]"),
            // A per-job volume's name: the job's name for it and ten random hex digits.
            (r"\b([a-z]+)-[0-9a-f]{10}\b", "$1-[ID]"),
            (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
            // An event's index, first in its line of `csivol events`.
            (r"(?m)^\d+( +\[TIME\])", "[INDEX]$1"),
            // A claim's usage: its node samples it just after the claim is ready and sends
            // it on its own, so a claim read at once may or may not carry it yet, and its
            // figures are the host file system's.
            (r"(?m)^ +usage: .*\n", ""),
            (r" {2,}", "  "),
        ];
        Self {
            dev_dir: dev_dir.display().to_string(),
            rules: rules
                .into_iter()
                .map(|(re, to)| (Regex::new(re).unwrap(), to))
                .collect(),
        }
    }

    fn apply(&self, text: &str) -> String {
        let mut text = text.replace(&self.dev_dir, "/home/me/csivol-dev");
        for (re, to) in &self.rules {
            text = re.replace_all(&text, *to).into_owned();
        }
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        lines.join("\n").trim_end().to_owned()
    }
}

/// Runs `page`'s console examples against a dev cluster of its own.
fn check(name: &str, page: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join(page)).unwrap();
    let steps = steps(&text);
    assert!(
        steps.len() >= 3,
        "{page}: only {} console steps",
        steps.len()
    );

    let test = TestDir::new(&format!("docs-{name}"));
    let mut dev = Dev {
        dir: test.join("csivol-dev"),
        home: test.join("home"),
        url: format!("https://127.0.0.1:{}", free_port()),
        runs: 0,
        nodes: 2,
        extra: Vec::new(),
    };
    let proc = dev.start();
    // Every demo volume created, as a reader who waited a moment finds them.
    wait_for("the demo volumes free", Duration::from_secs(120), || {
        let out = dev.sourced("csivol volume list -o json");
        let free = out.stdout.matches("\"state\": \"free\"").count();
        (out.code == 0 && free == 3).then_some(())
    });
    let filters = Filters::new(&dev.dir.canonicalize().unwrap());
    let assert = Assert::new();
    for step in &steps {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = run(&dev, test.path(), &step.command);
            let actual = filters.apply(&out.stdout);
            let expected = filters.apply(&step.expected);
            let matched = assert
                .try_eq(None, actual.clone().into(), expected.clone().into())
                .is_ok();
            if matched {
                break;
            }
            if !step.waits || Instant::now() >= deadline {
                eprintln!(
                    "{page}:{}: `{}` printed (unfiltered):\n{}",
                    step.line, step.command, out.stdout
                );
                assert.eq(actual, expected);
                unreachable!("the assertion above failed");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    interrupt(proc);
}

/// `command` in bash, as a reader types it after `source csivol-dev/env`, from `cwd`.
fn run(dev: &Dev, cwd: &Path, command: &str) -> Out {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(format!(
            "source {} && {{ {command}\n}} 2>&1",
            dev.dir.join("env").display()
        ))
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &dev.home)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null());
    crate::cluster::run(cmd)
}

#[test]
fn the_readme_tour_runs_as_shown() {
    check("readme", "README.md");
}

#[test]
fn getting_started_runs_as_shown() {
    check("getting-started", "docs/getting-started.md");
}

#[test]
fn the_ci_page_runs_as_shown() {
    check("ci", "docs/ci.md");
}

#[test]
fn several_teams_on_one_cluster_run_as_shown() {
    check("teams", "docs/running-a-cluster.md");
}

#[test]
fn console_blocks_are_read_as_steps() {
    let page = "text\n```console\n$ a\none\n\n$ b # after a while\ntwo\nthree\n```\n\
                ```sh\n$ not a step\n```\n";
    let s = steps(page);
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(
        (s[0].command.as_str(), s[0].expected.as_str()),
        ("a", "one")
    );
    assert!(s[1].waits && s[1].expected == "two\nthree", "{s:?}");
    let f = Filters::new(Path::new("/tmp/x/csivol-dev"));
    assert_eq!(
        f.apply("12     2026-11-30T01:29:17.099Z  a    operator:c94a138803cd  /tmp/x/csivol-dev/n"),
        "[INDEX]  [TIME]  a  operator:[ID]  /home/me/csivol-dev/n"
    );
}

/// README.md's one test command is the CI entry, `.ci/run`, which installs what the tests
/// need (cargo-deb for the package test among them) before it runs them: the command a new
/// contributor copies passes on a fresh machine as it passes in CI.
#[test]
fn the_readmes_test_command_is_the_one_ci_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("\nRun the tests")
        .nth(1)
        .expect("README.md says how to run the tests");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```sh block with the test command");
    let commands: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        commands,
        ["bash .ci/run"],
        "README.md's test command must be the CI entry alone"
    );
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(ci.starts_with("#!/usr/bin/env bash\n"), "{ci}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root.join(".ci/run"))
        .unwrap()
        .permissions()
        .mode();
    assert!(
        mode & 0o111 != 0,
        ".ci/run is executable (CI runs it as is)"
    );
    // What the tests need beyond the toolchain, installed when missing, and then the tests.
    for needed in [
        "cargo install cargo-deb",
        "missing+=(zsh)",
        "missing+=(fish)",
        "missing+=(iproute2)",
        "missing+=(etcd-server)",
        "missing+=(util-linux)",
        "missing+=(prometheus)",
        "cargo test --workspace --locked",
    ] {
        assert!(ci.contains(needed), ".ci/run lacks `{needed}`");
    }
}

/// docs/ci.md says what `--alloc` becomes on every CI system `csivol run` knows: the
/// prefix and the variables it is made of.
#[test]
fn the_ci_page_names_the_alloc_of_every_ci_system() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let page = std::fs::read_to_string(root.join("docs/ci.md")).unwrap();
    for (prefix, vars) in csivol::env::CI_JOB_IDS {
        assert!(
            page.contains(&format!("`{prefix}-`")),
            "docs/ci.md does not say that `--alloc` starts with `{prefix}-`"
        );
        for var in *vars {
            assert!(
                page.contains(&format!("`{var}`")),
                "docs/ci.md does not name {var}"
            );
        }
    }
    assert!(page.contains("`run-`"), "nor the random alloc's prefix");
}

/// docs/metrics-and-events.md lists every metric a real server exports and every kind of
/// event, and no kind that does not exist.
#[tokio::test]
async fn the_reference_lists_every_metric_and_event_kind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let page = std::fs::read_to_string(root.join("docs/metrics-and-events.md")).unwrap();
    let kinds: Vec<&str> = csivol_rules::kinds::EventKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    for kind in &kinds {
        assert!(
            page.contains(&format!("| `{kind}` |")),
            "docs/metrics-and-events.md does not list the event kind `{kind}`"
        );
    }
    let listed = Regex::new(r"(?m)^\| `([a-z]+(-[a-z]+)+)` \|").unwrap();
    for row in listed.captures_iter(&page) {
        assert!(
            kinds.contains(&&row[1]),
            "docs/metrics-and-events.md lists `{}`, which is no event kind",
            &row[1]
        );
    }

    let dir = TestDir::new("docs-metrics");
    let server = ServerProc::start(&dir.join("server"), &[]);
    let (status, text) = server.api().get("/v1/metrics").await;
    assert_eq!(status, 200, "{text}");
    let text = text.as_str().unwrap_or_default().to_owned();
    let mut names = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        // A counter's samples carry `_total`, and so does the page.
        let shown = if kind == "counter" {
            format!("{name}_total")
        } else {
            name.to_owned()
        };
        names += 1;
        assert!(
            page.contains(&format!("`{shown}`")) || page.contains(&format!("`{shown}{{")),
            "docs/metrics-and-events.md does not list the metric {shown}"
        );
    }
    assert!(
        names >= 10,
        "the server exported only {names} metrics:\n{text}"
    );
}

/// A heading's anchor as code hosts make it: lower case, spaces to `-`, punctuation gone.
pub(crate) fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every relative link of README.md, ARCHITECTURE.md and docs/ leads to a file that exists,
/// and to a heading of it when it names one.
#[test]
fn links_between_the_pages_lead_somewhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            }
        }
    }
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for cap in link.captures_iter(&text) {
            let target = &cap[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if fragment.is_empty() || path.is_dir() {
                continue;
            }
            let anchors: Vec<String> = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|h| anchor(h.trim_start_matches('#')))
                .collect();
            if !anchors.iter().any(|a| a == fragment) {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
    assert_eq!(
        anchor("The data dir, backups and restores"),
        "the-data-dir-backups-and-restores"
    );
}
