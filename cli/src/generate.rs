//! The CLI's share of the checked-in `completions/` and `man/`, generated from its clap
//! definitions, and the man-page writer every program's pages go through. The `csivol-gen`
//! program (`gen/`) writes them for every program; a test regenerates them and fails on
//! any difference.

use std::fs;
use std::path::Path;

use anyhow::Context;
use clap::{CommandFactory, ValueEnum};
use roff::{Roff, bold, roman};

use crate::args::{Cli, Shell};
use crate::commands::completions::file_name;
use crate::env;
use crate::failure::EXIT_CODES;

/// The CLI's completion scripts and man pages, into `completions` and `man`.
pub fn write_cli(completions: &Path, man: &Path) -> anyhow::Result<()> {
    for shell in Shell::value_variants() {
        let buf = crate::commands::completions::script(*shell);
        let path = completions.join(file_name(*shell));
        fs::write(&path, buf).with_context(|| format!("failed to write {}", path.display()))?;
    }
    // The exit codes and environment get sections of their own, not clap's EXTRA section.
    let cmd = Cli::command().after_long_help(None::<&str>);
    man_pages(cmd, man, &|root, page| extra_sections(root, page))
}

/// One page for `cmd` and one for each of its visible subcommands, recursively, each with
/// the roff `extra(is_root, page_name)` gives before its VERSION section.
pub fn man_pages(
    cmd: clap::Command,
    dir: &Path,
    extra: &dyn Fn(bool, &str) -> String,
) -> anyhow::Result<()> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    pages(&cmd, dir, true, extra)
}

fn pages(
    cmd: &clap::Command,
    dir: &Path,
    root: bool,
    extra: &dyn Fn(bool, &str) -> String,
) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages(sub, dir, false, extra)?;
    }
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    man.render(&mut page)?;
    let page = String::from_utf8(page).context("man page is not UTF-8")?;
    let name = man.get_filename();
    let extra = extra(root, name.trim_end_matches(".1"));
    // Before VERSION, where man pages usually keep such sections.
    let page = match page.find("\n.SH VERSION") {
        Some(i) => format!("{}\n{}{}", &page[..i], extra.trim_end(), &page[i..]),
        None => format!("{page}{extra}"),
    };
    let path = dir.join(&name);
    fs::write(&path, page).with_context(|| format!("failed to write {}", path.display()))
}

/// A roff section of `(tag, text)` paragraphs, the tag in bold.
pub fn section(title: &str, items: &[(&str, &str)]) -> String {
    let mut r = Roff::new();
    r.control("SH", [title]);
    for (tag, text) in items {
        r.control("TP", []);
        r.text([bold(*tag)]);
        r.text([roman(*text)]);
    }
    r.to_roff()
}

/// EXAMPLES per man page (by page name): what the command is for, as an operator types it.
const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "csivol",
        &[
            (
                "The cluster at a glance, redrawn as it changes:",
                "csivol status --watch",
            ),
            (
                "What is blocked, and the unblock commands (exit 6 if anything is):",
                "csivol status --blocked",
            ),
            (
                "Claim a volume for a job and wait until it is mounted:",
                "csivol claim data-1 --node node-1 --alloc job-1 --wait",
            ),
            (
                "The last 20 events, then every new one:",
                "csivol events --tail 20 -f",
            ),
        ],
    ),
    (
        "csivol-claim",
        &[
            (
                "Claim for writing and wait until ready:",
                "csivol claim data-1 --node node-1 --alloc job-1 --wait",
            ),
            (
                "Claim read-only with a lease, queueing behind other claims:",
                "csivol claim datasets --node node-1 --alloc job-2 --read-only --ttl 10m --queue --wait",
            ),
            (
                "Would the claim be accepted?",
                "csivol claim data-1 --node node-2 --alloc job-3 --dry-run",
            ),
        ],
    ),
    (
        "csivol-release",
        &[(
            "Release and wait until the node unmounted it:",
            "csivol release data-1 --alloc job-1 --wait",
        )],
    ),
    (
        "csivol-status",
        &[
            (
                "Gate a pipeline on nothing being blocked:",
                "csivol status --blocked -q > /dev/null || echo blocked",
            ),
            ("One volume in detail:", "csivol status data-1"),
            ("Watch the cluster:", "csivol status --watch"),
        ],
    ),
    (
        "csivol-unblock",
        &[
            (
                "See what an unblock would do:",
                "csivol unblock data-1 --dry-run",
            ),
            (
                "Every volume of a node that is really gone:",
                "csivol unblock --node node-2 --reason \"node-2 powered off\" --yes",
            ),
        ],
    ),
    (
        "csivol-node-drain",
        &[
            (
                "Take a node out of service and wait until it holds nothing:",
                "csivol node drain node-1 --wait --deadline 30m",
            ),
            ("Then forget it:", "csivol node remove node-1"),
        ],
    ),
    (
        "csivol-node-show",
        &[(
            "A node's heartbeat, claims, attachments and events:",
            "csivol node show node-1",
        )],
    ),
    (
        "csivol-events",
        &[
            (
                "The last hour of one volume:",
                "csivol events --volume data-1 --since 1h",
            ),
            ("Follow the log as JSON lines:", "csivol events -f -o json"),
        ],
    ),
    (
        "csivol-run",
        &[(
            "A CI job with a build cache and read-only datasets:",
            "csivol run build-cache datasets:ro --node \"$RUNNER_NODE\" -- make test",
        )],
    ),
    (
        "csivol-token-create",
        &[(
            "A named operator token, shown once:",
            "csivol token create --role operator --name alice > alice.token",
        )],
    ),
];

fn extra_sections(root: bool, page: &str) -> String {
    let mut r = Roff::new();
    if let Some((_, examples)) = EXAMPLES.iter().find(|(p, _)| *p == page) {
        r.control("SH", ["EXAMPLES"]);
        for (what, command) in *examples {
            r.control("TP", []);
            r.text([roman(*what)]);
            r.text([bold(*command)]);
        }
    }
    r.control("SH", ["EXIT STATUS"]);
    for (exit, meaning) in EXIT_CODES {
        r.control("TP", []);
        r.text([bold(exit.code().to_string())]);
        r.text([roman(*meaning)]);
    }
    if root {
        r.control("SH", ["ENVIRONMENT"]);
        for (name, meaning) in env::DOCUMENTED {
            r.control("TP", []);
            r.text([bold(*name)]);
            r.text([roman(*meaning)]);
        }
        r.control("SH", ["FILES"]);
        r.control("TP", []);
        r.text([bold(format!(
            "$XDG_CONFIG_HOME/{}",
            env::DEFAULT_TOKEN_FILE
        ))]);
        r.text([roman(format!(
            "The default token file (~/.config/{} when XDG_CONFIG_HOME is unset), read when \
             no token is given otherwise. Dev mode writes its operator token there.",
            env::DEFAULT_TOKEN_FILE
        ))]);
    }
    r.to_roff()
}
