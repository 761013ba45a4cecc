//! The real processes a run starts: the server, reference plugins and node agents. Each is
//! a `Proc`, killed by pid when dropped, so every exit path of the benchmark stops them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use csivol_tests::Proc;

/// The binaries a run needs, found next to the benchmark's own executable.
#[derive(Debug, Clone)]
pub struct Bins {
    pub server: PathBuf,
    pub agent: PathBuf,
    pub hostpath: PathBuf,
}

/// What to run when the binaries are missing: the build of this executable's profile.
fn build_hint(dir: &Path) -> String {
    let release = if dir.ends_with("debug") {
        ""
    } else {
        " --release"
    };
    format!(
        "cargo build{release} -p csivol-server -p csivol-agent -p csivol-hostpath -p csivol-tests \
         (or `cargo build{release} --workspace`), then run {}",
        dir.join("csivol-bench").display()
    )
}

impl Bins {
    /// Looks in `dir`, or next to this executable (`target/<profile>/`; one level up for a
    /// test harness in `target/<profile>/deps/`); `agent` instead of the csivol-agent found
    /// there when given.
    pub fn find(dir: Option<&Path>, agent: Option<&Path>) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("failed to locate csivol-bench")?;
        let here = exe
            .parent()
            .context("csivol-bench has no directory")?
            .to_owned();
        let dirs: Vec<PathBuf> = match dir {
            Some(d) => vec![d.to_owned()],
            None => vec![here.clone(), here.join("..")],
        };
        let find = |name: &str| -> anyhow::Result<PathBuf> {
            dirs.iter()
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .with_context(|| {
                    format!(
                        "{name} is not built next to csivol-bench (looked in {})\nhint: {}",
                        dirs.iter()
                            .map(|d| d.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        build_hint(&here)
                    )
                })
        };
        Ok(Self {
            server: find("csivol-server")?,
            agent: match agent {
                Some(a) if a.is_file() => a.to_owned(),
                Some(a) => anyhow::bail!(
                    "--agent-bin {} is not a file\nhint: build the node agent as it is installed \
                     with `cargo build --profile dist-agent -p csivol-agent`, then pass \
                     target/dist-agent/csivol-agent",
                    a.display()
                ),
                None => find("csivol-agent")?,
            },
            hostpath: find("csivol-hostpath")?,
        })
    }
}

/// Environment every child gets: quiet logs (warnings and errors still reach the log file).
fn quiet(cmd: &mut Command) {
    cmd.env("RUST_LOG", "warn");
}

/// `program` run by `wrapper` (a profiler, `nsenter` into a network namespace), which
/// takes it as its own argument; `program` itself without one.
fn wrapped(wrapper: &[String], program: &Path) -> Command {
    match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// `csivol-server serve` on a loopback port, with its data dir.
#[derive(Debug)]
pub struct Server {
    pub proc: Proc,
    pub url: String,
    pub token: String,
    pub data_dir: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    server: PathBuf,
    wrapper: Vec<String>,
}

impl Server {
    /// Starts the server on a loopback port and waits until it listens.
    pub async fn start(
        bins: &Bins,
        data_dir: &Path,
        heartbeat_ttl: Duration,
        controller_concurrency: Option<u32>,
        wrapper: &[String],
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let listen = "127.0.0.1:0";
        Self::start_on(
            bins,
            data_dir,
            listen,
            heartbeat_ttl,
            controller_concurrency,
            wrapper,
            extra,
        )
        .await
    }

    /// [`Server::start`] listening on `listen` (`ip:port`).
    pub async fn start_on(
        bins: &Bins,
        data_dir: &Path,
        listen: &str,
        heartbeat_ttl: Duration,
        controller_concurrency: Option<u32>,
        wrapper: &[String],
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let mut args = vec![
            "serve".to_owned(),
            format!("--data-dir={}", data_dir.display()),
            format!(
                "--heartbeat-ttl={}",
                humantime::format_duration(heartbeat_ttl)
            ),
        ];
        if let Some(c) = controller_concurrency {
            args.push(format!("--controller-concurrency={c}"));
        }
        args.extend(extra.iter().cloned());
        let log = data_dir.with_extension("log");
        Self::spawn(&bins.server, wrapper, data_dir, args, log, listen).await
    }

    async fn spawn(
        server: &Path,
        wrapper: &[String],
        data_dir: &Path,
        args: Vec<String>,
        log: PathBuf,
        listen: &str,
    ) -> anyhow::Result<Self> {
        let mut proc = Self::launch(server, wrapper, data_dir, &args, &log, listen);
        let url = Self::listening(&mut proc, data_dir, &log).await?;
        Self::started(proc, url, server, wrapper, data_dir, args, log)
    }

    /// Waits until the process listens (`server.addr` written, its start complete): its
    /// URL.
    async fn listening(proc: &mut Proc, data_dir: &Path, log: &Path) -> anyhow::Result<String> {
        let addr_file = data_dir.join("server.addr");
        wait_until("the server to listen", Duration::from_secs(30), || {
            if let Some(status) = proc.exited() {
                bail!("the server exited with {status}: {}", tail(log, 20));
            }
            Ok(std::fs::read_to_string(&addr_file)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()))
        })
        .await
    }

    /// The server that `proc` is, listening at `url`.
    fn started(
        proc: Proc,
        url: String,
        server: &Path,
        wrapper: &[String],
        data_dir: &Path,
        args: Vec<String>,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        // A server that joins a cluster another server of one etcd store made writes no
        // token: the caller takes the first server's.
        let joined = args.iter().any(|a| a == "--store=etcd");
        let token = match std::fs::read_to_string(data_dir.join("operator.token")) {
            Ok(t) => t.trim().to_owned(),
            Err(_) if joined => String::new(),
            Err(e) => return Err(e).context("the server wrote no operator token"),
        };
        Ok(Self {
            proc,
            url,
            token,
            data_dir: data_dir.to_owned(),
            args,
            log,
            server: server.to_owned(),
            wrapper: wrapper.to_owned(),
        })
    }

    /// Starts the process, without waiting for anything (`server.addr` removed first, so
    /// that its appearing says this one listens).
    fn launch(
        server: &Path,
        wrapper: &[String],
        data_dir: &Path,
        args: &[String],
        log: &Path,
        listen: &str,
    ) -> Proc {
        let _ = std::fs::remove_file(data_dir.join("server.addr"));
        let mut cmd = wrapped(wrapper, server);
        cmd.args(args).arg(format!("--listen={listen}"));
        quiet(&mut cmd);
        Proc::spawn("csivol-server serve", cmd, log)
    }

    /// The address it listens on (`ip:port`), to start it there again.
    fn listen(&self) -> anyhow::Result<String> {
        Ok(self
            .url
            .strip_prefix("http://")
            .or_else(|| self.url.strip_prefix("https://"))
            .context("the server URL is neither http:// nor https://")?
            .to_owned())
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Whether the server runs (not killed, not exited, not left down by a restart that
    /// failed).
    pub fn running(&mut self) -> bool {
        self.proc.running()
    }

    /// SIGKILL, then start again on the same data dir and the same address (agents keep
    /// their `--server` URL).
    pub async fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        self.proc.kill();
        self.start_again().await
    }

    /// SIGTERM, as a service manager stops it: its exit status (`None`: it had not exited
    /// within `timeout`, and was killed).
    pub async fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        terminate(&mut self.proc, timeout).await
    }

    /// Starts it again (after it stopped) on the same data dir and address, with the same
    /// arguments, and waits until it listens.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        let listen = self.listen()?;
        let token = self.token.clone();
        let fresh = Self::spawn(
            &self.server,
            &self.wrapper,
            &self.data_dir,
            self.args.clone(),
            self.log.clone(),
            &listen,
        )
        .await?;
        *self = fresh;
        if self.token.is_empty() {
            self.token = token;
        }
        Ok(())
    }

    /// [`Server::start_again`], timing its start from the moment it listens for SIGTERM
    /// (its first step) to its listening for requests.
    pub async fn start_again_timed(&mut self) -> anyhow::Result<Duration> {
        let listen = self.listen()?;
        let token = self.token.clone();
        let mut proc = Self::launch(
            &self.server,
            &self.wrapper,
            &self.data_dir,
            &self.args,
            &self.log,
            &listen,
        );
        catches_term(&mut proc, &self.log, Duration::from_secs(30)).await?;
        let first = Instant::now();
        let url = Self::listening(&mut proc, &self.data_dir, &self.log).await?;
        let took = first.elapsed();
        *self = Self::started(
            proc,
            url,
            &self.server,
            &self.wrapper,
            &self.data_dir,
            self.args.clone(),
            self.log.clone(),
        )?;
        if self.token.is_empty() {
            self.token = token;
        }
        Ok(took)
    }

    /// Starts it again (after it stopped) and sends it SIGTERM while it starts: `delay`
    /// after it listens for the signal (its handler installed, which no process can do
    /// before its first step). Returns its exit status (`None`: not within `timeout`, then
    /// killed) and whether its start was complete (`server.addr` written) by the signal. It
    /// is left stopped.
    pub async fn interrupt_start(
        &mut self,
        delay: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Interrupted> {
        let listen = self.listen()?;
        self.proc = Self::launch(
            &self.server,
            &self.wrapper,
            &self.data_dir,
            &self.args,
            &self.log,
            &listen,
        );
        catches_term(&mut self.proc, &self.log, timeout).await?;
        tokio::time::sleep(delay).await;
        let complete = self.data_dir.join("server.addr").exists();
        let status = terminate(&mut self.proc, timeout).await;
        Ok(Interrupted { status, complete })
    }

    /// Replaces the value of `--NAME=…` among its arguments (or adds it), for its next start.
    pub fn set_arg(&mut self, name: &str, value: &str) {
        let flag = format!("--{name}=");
        self.args.retain(|a| !a.starts_with(&flag));
        self.args.push(format!("{flag}{value}"));
    }

    /// The value of `--NAME=…` among its arguments.
    pub fn arg(&self, name: &str) -> Option<&str> {
        let flag = format!("--{name}=");
        self.args.iter().find_map(|a| a.strip_prefix(&flag))
    }

    /// The end of the server's log, for error messages.
    pub fn log_tail(&self) -> String {
        tail(&self.log, 20)
    }

    /// Lines of the server's log (over restarts) that contain `what`.
    pub fn log_count(&self, what: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(what))
            .count()
    }
}

/// A `csivol-hostpath` plugin serving on a unix socket.
pub fn start_plugin(
    bins: &Bins,
    node: &str,
    node_dir: &Path,
    backend: &Path,
    mount: &str,
) -> anyhow::Result<(Proc, PathBuf)> {
    std::fs::create_dir_all(node_dir)?;
    let socket = node_dir.join("plugin.sock");
    let mut cmd = Command::new(&bins.hostpath);
    cmd.args([
        format!("--endpoint=unix://{}", socket.display()),
        format!("--node-id={node}"),
        format!("--state-dir={}", node_dir.join("plugin").display()),
        format!("--backend-dir={}", backend.display()),
        format!("--mount={mount}"),
        // The plugin plays the storage system; its own fsyncs are not csivol's cost.
        "--no-fsync".to_owned(),
    ]);
    quiet(&mut cmd);
    let proc = Proc::spawn(
        &format!("{node} csivol-hostpath"),
        cmd,
        &node_dir.join("plugin.log"),
    );
    Ok((proc, socket))
}

/// Waits until the plugin accepts a connection on `socket`, or its process exited.
pub async fn wait_socket(proc: &mut Proc, socket: &Path, log: &Path) -> anyhow::Result<()> {
    wait_until(
        &format!("{} to listen", proc.name),
        Duration::from_secs(30),
        || {
            if let Some(status) = proc.exited() {
                bail!("{} exited with {status}: {}", proc.name, tail(log, 20));
            }
            // The socket file appears at bind(), before listen(): only a connection that
            // is accepted says the plugin listens.
            Ok(std::os::unix::net::UnixStream::connect(socket)
                .is_ok()
                .then_some(()))
        },
    )
    .await
}

/// Settings of one node agent.
#[derive(Debug)]
pub struct AgentSpec<'a> {
    pub node: &'a str,
    pub node_dir: &'a Path,
    pub server: &'a str,
    pub token: &'a str,
    pub socket: &'a Path,
    pub ready_exists: bool,
    pub node_concurrency: Option<u32>,
    /// How often the agent lists its hosted controller's volumes [default: the agent's].
    pub controller_list_interval: Option<Duration>,
    /// The command the agent runs under (`nsenter` into its host), if any.
    pub wrapper: &'a [String],
    /// The CA of `https://` servers.
    pub ca: Option<&'a Path>,
    /// Whether the agent samples its volumes' usage (`volume_stats`).
    pub volume_stats: bool,
}

/// `csivol-agent run` with the node's plugin as node plugin and controller.
pub fn start_agent(bins: &Bins, spec: &AgentSpec<'_>) -> anyhow::Result<Proc> {
    let token_file = spec.node_dir.join("token");
    std::fs::write(&token_file, spec.token)
        .with_context(|| format!("failed to write {}", token_file.display()))?;
    let endpoint = format!("unix://{}", spec.socket.display());
    let mut cmd = wrapped(spec.wrapper, &bins.agent);
    cmd.args([
        "run".to_owned(),
        format!("--server={}", spec.server),
        format!("--node={}", spec.node),
        format!("--data-dir={}", spec.node_dir.join("agent").display()),
        format!("--token-file={}", token_file.display()),
        format!("--plugin={}={endpoint}", super::PLUGIN),
        format!("--controller={}={endpoint}", super::PLUGIN),
    ]);
    if spec.ready_exists {
        cmd.arg("--ready-check=exists");
    }
    if let Some(ca) = spec.ca {
        cmd.arg(format!("--ca-cert={}", ca.display()));
    }
    let mut config = String::new();
    if let Some(n) = spec.node_concurrency {
        config.push_str(&format!("node_concurrency = {n}\n"));
    }
    if let Some(every) = spec.controller_list_interval {
        config.push_str(&format!(
            "controller_list_interval = \"{}\"\n",
            humantime::format_duration(every)
        ));
    }
    if !spec.volume_stats {
        config.push_str("volume_stats = false\n");
    }
    if !config.is_empty() {
        let path = spec.node_dir.join("agent.toml");
        std::fs::write(&path, config)?;
        cmd.arg(format!("--config={}", path.display()));
    }
    quiet(&mut cmd);
    Ok(Proc::spawn(
        &format!("{} csivol-agent run", spec.node),
        cmd,
        &spec.node_dir.join("agent.log"),
    ))
}

/// Polls `cond` every few milliseconds until it yields, fails, or `timeout` passed.
pub async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond()? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The last `lines` lines of a log file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    format!("{} (log: {})", all[start..].join("\n"), path.display())
}

/// A daemon stopped while it started.
#[derive(Debug)]
pub struct Interrupted {
    /// Its exit status; `None`: it had not exited in time (then it was killed).
    pub status: Option<std::process::ExitStatus>,
    /// Whether its start was complete by the signal: a server listening (`server.addr`
    /// written), an agent registered.
    pub complete: bool,
}

/// SIGTERM to `proc`, then its exit status once it exited (`None`: not within `timeout`,
/// then SIGKILL). A process that had exited already gives the status it exited with.
pub async fn terminate(proc: &mut Proc, timeout: Duration) -> Option<std::process::ExitStatus> {
    if let Some(status) = proc.exited() {
        return Some(status);
    }
    if let Some(pid) = rustix::process::Pid::from_raw(proc.pid() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = proc.exited() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            proc.kill();
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `proc` catches SIGTERM (`SigCgt` in `/proc/PID/status`): its handler is
/// installed, so a SIGTERM from now on is the daemon's to take, not the default action's.
pub async fn catches_term(proc: &mut Proc, log: &Path, timeout: Duration) -> anyhow::Result<()> {
    let pid = proc.pid();
    let name = proc.name.clone();
    wait_until(&format!("{name} to listen for SIGTERM"), timeout, || {
        if let Some(status) = proc.exited() {
            bail!(
                "{name} exited with {status} as it started: {}",
                tail(log, 20)
            );
        }
        Ok(catches_term_now(pid).then_some(()))
    })
    .await
}

/// Whether process `pid` catches SIGTERM now.
pub fn catches_term_now(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    catches(&status, 15)
}

/// Whether a `/proc/PID/status` text says the process catches signal `sig`.
fn catches(status: &str, sig: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (sig - 1)) != 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_caught_signals_are_read_from_the_status_mask() {
        // SIGINT (2) and SIGTERM (15) caught, as a tokio daemon listening for both.
        let status = "Name:\tcsivol-agent\nSigIgn:\t0000000000001000\nSigCgt:\t0000000180004002\n";
        assert!(super::catches(status, 15));
        assert!(super::catches(status, 2));
        assert!(!super::catches(status, 13));
        assert!(!super::catches("SigCgt:\t0000000000000000\n", 15));
        assert!(!super::catches("", 15));
    }
}
