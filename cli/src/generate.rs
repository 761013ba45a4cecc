//! The checked-in `completions/` and `man/`, generated from the clap definitions (by the
//! `csivol-gen` binary). A test regenerates them and fails on any difference.

use std::fs;
use std::path::Path;

use anyhow::Context;
use clap::{CommandFactory, ValueEnum};
use roff::{Roff, bold, roman};

use crate::args::{Cli, Shell};
use crate::commands::completions::{clap_shell, file_name};
use crate::env;
use crate::failure::EXIT_CODES;

pub fn write_all(root: &Path) -> anyhow::Result<()> {
    let dir = root.join("completions");
    recreate(&dir)?;
    for shell in Shell::value_variants() {
        let mut buf = Vec::new();
        clap_complete::generate(clap_shell(*shell), &mut Cli::command(), "csivol", &mut buf);
        let path = dir.join(file_name(*shell));
        fs::write(&path, buf).with_context(|| format!("failed to write {}", path.display()))?;
    }

    let dir = root.join("man");
    recreate(&dir)?;
    // The exit codes and environment get sections of their own, not clap's EXTRA section.
    let mut cmd = Cli::command()
        .after_long_help(None::<&str>)
        .disable_help_subcommand(true);
    cmd.build();
    man_pages(&cmd, &dir, true)
}

fn recreate(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("failed to remove {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))
}

/// One page for the command and one for each of its visible subcommands, recursively.
fn man_pages(cmd: &clap::Command, dir: &Path, root: bool) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub, dir, false)?;
    }
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    man.render(&mut page)?;
    let page = String::from_utf8(page).context("man page is not UTF-8")?;
    let extra = extra_sections(root);
    // Before VERSION, where man pages usually keep such sections.
    let page = match page.find("\n.SH VERSION") {
        Some(i) => format!("{}\n{}{}", &page[..i], extra.trim_end(), &page[i..]),
        None => format!("{page}{extra}"),
    };
    let path = dir.join(man.get_filename());
    fs::write(&path, page).with_context(|| format!("failed to write {}", path.display()))
}

fn extra_sections(root: bool) -> String {
    let mut r = Roff::new();
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
