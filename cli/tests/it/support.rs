//! Running the real `csivol` binary against a real server process, and snapshotting what it
//! prints with the parts that change from run to run (times, ports, tokens, indexes, ages)
//! replaced.

use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const WAIT: Duration = Duration::from_secs(20);

/// What one run of `csivol` did.
#[derive(Debug, Clone)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self}"))
    }
}

/// Exit code, stdout and stderr, in one text for one snapshot.
impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "exit: {}", self.code)?;
        writeln!(f, "--- stdout")?;
        write!(f, "{}", self.stdout)?;
        writeln!(f, "--- stderr")?;
        write!(f, "{}", self.stderr)
    }
}

/// Replacements applied to every snapshot.
pub const FILTERS: &[(&str, &str)] = &[
    (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]"),
    (r#""index": \d+"#, r#""index": [INDEX]"#),
    (r#""silent_ms": \d+"#, r#""silent_ms": [MS]"#),
    (r"csivol_[0-9a-f]{64}", "[TOKEN]"),
    (r"(operator|reader):[0-9a-f]{12}", "$1:[TOKEN-ID]"),
    (r"token [0-9a-f]{12}\b", "token [TOKEN-ID]"),
    (r"token [0-9a-f]{1,11}…", "token [TOKEN-ID]…"),
    (r#""id": "[0-9a-f]{12}""#, r#""id": "[TOKEN-ID]""#),
    (r"(?m)^id:( +)[0-9a-f]{12}$", "id:$1[TOKEN-ID]"),
    (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
    (r"/tmp/csivol-[A-Za-z0-9_.-]+", "[TMP]"),
    // Ages: always the last column of a table, or followed by "ago".
    (r"\b\d+[smhd](\d+[smh])? ago\b", "[AGE] ago"),
    // How long a command ran (a fence method).
    (r"\bin \d+(\.\d+)?(ms|s|us|µs)\b", "in [DURATION]"),
    (r"(?m)\b\d+[smhd](\d+[smh])?$", "[AGE]"),
];

/// Snapshots a [`Run`] (or any `Display`) with [`FILTERS`] applied.
#[macro_export]
macro_rules! snap {
    ($run:expr, @$snapshot:literal) => {{
        let text = $run.to_string();
        insta::with_settings!({
            filters => $crate::support::FILTERS.iter().copied().collect::<Vec<_>>(),
            prepend_module_to_snapshot => false,
        }, {
            insta::assert_snapshot!(text, @$snapshot);
        })
    }};
}

/// A server, its operator token, and a home directory of its own for `csivol` (so no
/// token file of the machine's user is ever picked up).
pub struct Env {
    pub server: ServerProc,
    pub dir: TestDir,
}

impl Env {
    pub fn start(name: &str) -> Self {
        Self::start_with(name, &[])
    }

    pub fn start_with(name: &str, server_args: &[&str]) -> Self {
        let dir = TestDir::new(&format!("cli-{name}"));
        let server = ServerProc::start(&dir.join("server"), server_args);
        std::fs::create_dir_all(dir.join("home")).unwrap();
        Self { server, dir }
    }

    pub fn api(&self) -> Api {
        self.server.api()
    }

    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// `csivol` with the server's address and operator token in the environment.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_csivol"));
        cmd.args(args)
            .env_remove("CSIVOL_TOKEN_FILE")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("COLUMNS")
            .env_remove("NO_COLOR")
            .env("HOME", self.home())
            .env("CSIVOL_ADDR", &self.server.url)
            .env("CSIVOL_TOKEN", &self.server.token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    pub async fn run(&self, args: &[&str]) -> Run {
        run(self.command(args)).await
    }

    /// Starts `csivol` in the background, for commands that wait on what the test does next.
    pub fn spawn(&self, args: &[&str]) -> tokio::task::JoinHandle<Run> {
        tokio::spawn(run(self.command(args)))
    }

    /// Runs with `input` on stdin.
    pub async fn run_stdin(&self, args: &[&str], input: &str) -> Run {
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::piped());
        let mut child = cmd.spawn().expect("start csivol");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        drop(stdin);
        finish(child).await
    }

    /// Writes a file in the test dir, returns its path as a string.
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// Registers volume `name` (plugin `hp`, with a secret) through the CLI.
    pub async fn volume(&self, name: &str, mode: &str) {
        let spec = self.file(
            &format!("{name}.toml"),
            &format!(
                "name = \"{name}\"\nplugin = \"hp\"\nexternal_id = \"ext-{name}\"\n\
                 access_mode = \"{mode}\"\nattachment = \"file-system\"\n\
                 [secrets]\npassword = \"hunter2-{name}\"\n"
            ),
        );
        let r = self.run(&["volume", "register", &spec]).await;
        assert_eq!(r.code, 0, "{r}");
    }

    /// A node agent stand-in, registered with plugin `hp`, hosting its controller.
    pub async fn node(&self, name: &str, max: u32) -> FakeAgent {
        let agent = FakeAgent::new(&self.server, name).await;
        agent.register(max, true, json!([])).await;
        agent
    }
}

/// The result of [`Env::spawn`].
pub async fn done(handle: tokio::task::JoinHandle<Run>) -> Run {
    tokio::time::timeout(Duration::from_secs(60), handle)
        .await
        .expect("csivol finished within a minute")
        .expect("csivol task")
}

pub async fn run(mut cmd: tokio::process::Command) -> Run {
    finish(cmd.spawn().expect("start csivol")).await
}

async fn finish(child: tokio::process::Child) -> Run {
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("csivol finished within a minute")
        .expect("csivol ran");
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    }
}

/// Drives a claim through the controller publish and the node publish, as the agents
/// would: ControllerPublish by `host`, then publish on `node`.
pub async fn make_ready(host: &FakeAgent, node: &FakeAgent, volume: &str, alloc: &str) {
    let op = host.wait_op("publish").await;
    host.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}]))
        .await;
    node.report(json!([{"kind": "published", "volume": volume, "alloc": alloc, "target_path": format!("/mnt/csivol/{volume}/{alloc}")}]))
        .await;
}

/// The confirmation prompt of destructive commands.
pub const PROMPT: &str = "Proceed? [y/N] ";

/// What a run on a terminal waits for.
#[derive(Clone, Copy, Debug)]
pub enum Terminal<'a> {
    /// The command's end.
    Exit,
    /// The prompt, then types this answer and Enter, as a person would.
    Answer(&'a str),
    /// This text, then stops the command (one that follows forever).
    Until(&'a str),
}

/// Runs `csivol args` on a terminal of its own (util-linux `script`), without colours.
/// The terminal carries stdout and stderr both, and the echo of an answer, with `\r\n`
/// line ends (turned into `\n` here: a `\r` left is one the command wrote).
pub async fn on_terminal(env: &Env, args: &[&str], wait: Terminal<'_>) -> Run {
    on_terminal_as(env, &env.server.token, args, wait).await
}

/// [`on_terminal`] with another token than the operator's.
pub async fn on_terminal_as(env: &Env, token: &str, args: &[&str], wait: Terminal<'_>) -> Run {
    if let Err(e) = std::process::Command::new("script")
        .arg("--version")
        .output()
    {
        panic!(
            "cannot run `script` (util-linux) for a terminal: {e}; apt-get install -y util-linux"
        );
    }
    let csivol = env.command(args);
    let mut line = vec![quote(env!("CARGO_BIN_EXE_csivol"))];
    line.extend(args.iter().map(|a| quote(a)));
    let mut cmd = tokio::process::Command::new("script");
    // -q: no "Script started" lines; -e: csivol's exit code; -c: the command; /dev/null:
    // no typescript file.
    cmd.args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
        .envs(
            csivol
                .as_std()
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k, v))),
        )
        .env("CSIVOL_TOKEN", token)
        .env("SHELL", "/bin/sh")
        .env("NO_COLOR", "1")
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("start script");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let awaited = match wait {
        Terminal::Exit => None,
        Terminal::Answer(_) => Some(PROMPT),
        Terminal::Until(text) => Some(text),
    };
    if let Some(text) = awaited {
        let found = tokio::time::timeout(WAIT, async {
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains(text) {
                let n = stdout.read(&mut buf).await.unwrap();
                if n == 0 {
                    return false;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            true
        })
        .await;
        match (wait, found) {
            (Terminal::Answer(answer), Ok(true)) => stdin
                .write_all(format!("{answer}\n").as_bytes())
                .await
                .unwrap(),
            (Terminal::Until(_), Ok(true)) => {
                child.kill().await.unwrap();
            }
            (Terminal::Until(text), _) => panic!(
                "`csivol {}` never printed {text:?}:\n{}",
                args.join(" "),
                String::from_utf8_lossy(&seen)
            ),
            _ => {}
        }
    }
    drop(stdin);
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, stdout.read_to_end(&mut rest))
        .await
        .expect("csivol finished")
        .unwrap();
    seen.extend(rest);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("script exited")
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(seen).unwrap().replace("\r\n", "\n"),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
