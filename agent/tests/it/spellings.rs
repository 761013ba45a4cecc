//! The command line of the agent's upgrade: the old `csivol-agent node` still runs the
//! agent (with a notice), and the commands that moved to other programs say where.

use std::process::Command;
use std::time::Duration;

use csivol_tests::{TestDir, bin_path, run_to_exit};

fn agent(args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(bin_path("csivol-agent"));
    cmd.args(args);
    run_to_exit("csivol-agent", cmd, Duration::from_secs(30))
}

#[test]
fn the_old_node_spelling_runs_the_agent_with_a_notice() {
    let dir = TestDir::new("agent-node-spelling");
    let token = dir.join("missing.token");
    let args = |verb: &'static str| {
        vec![
            verb.to_owned(),
            "--server=http://127.0.0.1:1".to_owned(),
            "--node=n1".to_owned(),
            format!("--data-dir={}", dir.join("agent").display()),
            format!("--token-file={}", token.display()),
            "--plugin=hp=unix:///nonexistent.sock".to_owned(),
        ]
    };
    // Both spellings reach the agent itself, which refuses the missing token file.
    for verb in ["run", "node"] {
        let args = args(verb);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, out) = agent(&args);
        assert!(!status.success(), "{out}");
        assert!(
            out.contains(&format!(
                "failed to read the token file {}",
                token.display()
            )),
            "{verb}: {out}"
        );
        let notice = "warning: `csivol-agent node` is now `csivol-agent run`";
        assert_eq!(out.contains(notice), verb == "node", "{verb}: {out}");
    }
}

#[test]
fn moved_commands_name_the_program_and_the_command_to_run() {
    for (args, hint) in [
        (
            &[
                "server",
                "--data-dir=/var/lib/csivol",
                "--listen=0.0.0.0:7420",
            ][..],
            "hint: run `csivol-server serve --data-dir=/var/lib/csivol --listen=0.0.0.0:7420`",
        ),
        (
            &["server", "--data-dir=/d", "backup", "--to=/b.db"][..],
            "hint: run `csivol-server backup --data-dir=/d --to=/b.db`",
        ),
        (
            &["server", "--data-dir=/d", "rotate-secrets-key"][..],
            "hint: run `csivol-server rotate-secrets-key --data-dir=/d`",
        ),
        (
            &["dev", "--nodes", "2"][..],
            "hint: run `csivol-server dev --nodes 2`",
        ),
        (
            &["tls", "init", "--dir=/etc/csivol/tls", "--node=a b"][..],
            "hint: run `csivol-server tls init --dir=/etc/csivol/tls '--node=a b'`",
        ),
        (
            &["hostpath", "--endpoint=unix:///p.sock"][..],
            "hint: run `csivol-hostpath --endpoint=unix:///p.sock`",
        ),
    ] {
        let (status, out) = agent(args);
        assert_eq!(status.code(), Some(2), "a usage error: {out}");
        assert!(
            out.contains(&format!(
                "error: `csivol-agent {}` is no longer part of csivol-agent",
                args[0]
            )),
            "{out}"
        );
        assert!(out.contains(hint), "{args:?}: {out}");
    }
}
