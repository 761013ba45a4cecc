//! Network namespaces for tests and the fault campaign: a namespace of the test's own
//! ([`NetNs`]), and a small routed network of them ([`Net`]) whose hosts can be cut off
//! from each other and mended, with nothing but iproute2 and util-linux. Nothing touches
//! the machine's own network: every link and rule lives in namespaces made here, which go
//! away with the processes that hold them.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::{Proc, run_to_exit, wait_for};

/// A system tool, with the package that brings it when it is missing (`.ci/run` installs
/// them on Debian).
pub fn tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`{name}` is missing: install {package} (`.ci/run` does)"))
}

/// A network namespace of the test's own, its loopback up. A `sleep` holds it, killed by
/// pid when this is dropped; the namespace goes with it.
#[derive(Debug)]
pub struct NetNs {
    holder: Proc,
    /// `/proc/<holder>/ns/net`.
    path: String,
    nsenter: PathBuf,
}

impl NetNs {
    /// A fresh namespace, its holder's output in `<dir>/netns-<name>.log`. The holder
    /// sleeps for `lifetime` at most, should the test runner die without killing it.
    pub fn new(dir: &Path, name: &str, lifetime: Duration) -> Self {
        let mut cmd = Command::new(tool("unshare", "util-linux"));
        // `unshare` execs the sleep, so the holder's pid is the namespace's process.
        cmd.args([
            "--net",
            "--",
            "sleep",
            &lifetime.as_secs().max(1).to_string(),
        ]);
        let holder = Proc::spawn(
            &format!("network namespace {name}"),
            cmd,
            &dir.join(format!("netns-{name}.log")),
        );
        let path = format!("/proc/{}/ns/net", holder.pid());
        let here = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        // Until the holder is in its own namespace, entering its namespace would enter
        // this thread's: wait until it is.
        wait_for("the new network namespace", Duration::from_secs(10), || {
            std::fs::read_link(&path).ok().filter(|ns| *ns != here)
        });
        let ns = Self {
            holder,
            path,
            nsenter: tool("nsenter", "util-linux"),
        };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// The holder's pid (`ip link set … netns <pid>` moves a link into the namespace).
    pub fn pid(&self) -> u32 {
        self.holder.pid()
    }

    /// Runs `ip args` in the namespace; panics if it fails.
    pub fn ip(&self, args: &[&str]) {
        self.run(tool("ip", "iproute2").to_str().unwrap(), args);
    }

    /// Runs `program args` in the namespace to its end; panics if it fails.
    pub fn run(&self, program: &str, args: &[&str]) {
        let mut cmd = Command::new(&self.nsenter);
        cmd.args(self.wrapper()).arg(program).args(args);
        let (status, out) = run_to_exit(program, cmd, Duration::from_secs(10));
        assert!(
            status.success(),
            "{program} {args:?} in the namespace: {out}"
        );
    }

    /// `nsenter`'s arguments that run a program in the namespace: it execs the program,
    /// so the pid is the program's.
    fn wrapper(&self) -> [String; 2] {
        [format!("--net={}", self.path), "--".to_owned()]
    }

    /// The full command prefix that runs a program in the namespace, as
    /// [`crate::ServerProc::start_via`] takes it.
    pub fn prefix(&self) -> Vec<String> {
        let mut v = vec![self.nsenter.to_str().unwrap().to_owned()];
        v.extend(self.wrapper());
        v
    }

    /// `program` to be run in the namespace (its pid is the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(&self.nsenter);
        cmd.args(self.wrapper()).arg(program);
        cmd
    }

    /// Moves the calling thread into the namespace. Sockets it opens afterwards, and the
    /// threads and processes it starts, are in the namespace too; other threads are not.
    pub fn enter_this_thread(&self) {
        let ns = std::fs::File::open(&self.path)
            .unwrap_or_else(|e| panic!("failed to open {}: {e}", self.path));
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap_or_else(|e| panic!("failed to enter the network namespace {}: {e}", self.path));
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        self.holder.kill();
    }
}

/// One host of a [`Net`]: a namespace with one address, its default route through the
/// router.
#[derive(Debug)]
pub struct Host {
    pub name: String,
    pub addr: Ipv4Addr,
    /// The router's end of the host's link.
    link: String,
    pub ns: NetNs,
}

impl Host {
    /// The command prefix that runs a program on this host.
    pub fn prefix(&self) -> Vec<String> {
        self.ns.prefix()
    }
}

/// A routed network of hosts, each a namespace with a veth link to a router namespace
/// (host `i` is `10.213.<i+1>.2/24`, the router `10.213.<i+1>.1`). The router forwards
/// between them; a cut between two hosts is a policy rule on the router that drops what
/// either sends the other (`ip rule … blackhole`): packets vanish in silence, as in a real
/// partition, and connections hang rather than fail. A thread that enters the router
/// ([`Net::enter_router`]) reaches every host whatever is cut: the test's view from
/// outside.
#[derive(Debug)]
pub struct Net {
    pub router: NetNs,
    pub hosts: Vec<Host>,
    cuts: Mutex<BTreeSet<(usize, usize)>>,
}

impl Net {
    /// The router and one host per name, each namespace held for `lifetime` at most.
    pub fn new(dir: &Path, names: &[&str], lifetime: Duration) -> Self {
        assert!(names.len() < 250, "one /24 per host");
        let router = NetNs::new(dir, "router", lifetime);
        router.run("sh", &["-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
        let hosts = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let ns = NetNs::new(dir, name, lifetime);
                let subnet = i + 1;
                let addr = Ipv4Addr::new(10, 213, subnet as u8, 2);
                let gateway = format!("10.213.{subnet}.1");
                // A veth pair rather than a dummy link: veth is in every kernel that runs
                // containers.
                let (link, peer) = (format!("r{subnet}"), format!("h{subnet}"));
                let pid = ns.pid().to_string();
                router.ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer]);
                router.ip(&["link", "set", &peer, "netns", &pid]);
                router.ip(&["addr", "add", &format!("{gateway}/24"), "dev", &link]);
                router.ip(&["link", "set", &link, "up"]);
                ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", &peer]);
                ns.ip(&["link", "set", &peer, "up"]);
                ns.ip(&["route", "add", "default", "via", &gateway]);
                Host {
                    name: (*name).to_owned(),
                    addr,
                    link,
                    ns,
                }
            })
            .collect();
        Self {
            router,
            hosts,
            cuts: Mutex::new(BTreeSet::new()),
        }
    }

    fn index(&self, name: &str) -> usize {
        self.hosts
            .iter()
            .position(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host `{name}` in this network"))
    }

    pub fn host(&self, name: &str) -> &Host {
        &self.hosts[self.index(name)]
    }

    fn rule(&self, verb: &str, from: usize, to: usize) {
        let (a, b) = (
            self.hosts[from].addr.to_string(),
            self.hosts[to].addr.to_string(),
        );
        self.router
            .ip(&["rule", verb, "from", &a, "to", &b, "blackhole"]);
    }

    /// Drops everything between hosts `a` and `b`, both ways (a no-op if already cut).
    pub fn cut(&self, a: &str, b: &str) {
        let (i, j) = (self.index(a), self.index(b));
        let pair = (i.min(j), i.max(j));
        if self.cuts.lock().unwrap().insert(pair) {
            self.rule("add", i, j);
            self.rule("add", j, i);
        }
    }

    /// Cuts `a` off from every host in `others`.
    pub fn isolate(&self, a: &str, others: &[&str]) {
        for b in others {
            self.cut(a, b);
        }
    }

    /// Mends the cut between `a` and `b` (a no-op if there is none).
    pub fn mend(&self, a: &str, b: &str) {
        let (i, j) = (self.index(a), self.index(b));
        if self.cuts.lock().unwrap().remove(&(i.min(j), i.max(j))) {
            self.rule("del", i, j);
            self.rule("del", j, i);
        }
    }

    /// Mends every cut.
    pub fn heal(&self) {
        let cuts: Vec<_> = std::mem::take(&mut *self.cuts.lock().unwrap())
            .into_iter()
            .collect();
        for (i, j) in cuts {
            self.rule("del", i, j);
            self.rule("del", j, i);
        }
    }

    /// The pairs cut now, by host name.
    pub fn cuts(&self) -> Vec<(String, String)> {
        self.cuts
            .lock()
            .unwrap()
            .iter()
            .map(|(i, j)| (self.hosts[*i].name.clone(), self.hosts[*j].name.clone()))
            .collect()
    }

    /// Takes host `name`'s link down at the router (`up: false`) or up again: everything
    /// it sends or is sent is refused at once (the router answers "unreachable"), unlike
    /// a cut, whose packets vanish.
    pub fn set_link(&self, name: &str, up: bool) {
        let link = &self.hosts[self.index(name)].link;
        self.router
            .ip(&["link", "set", link, if up { "up" } else { "down" }]);
    }

    /// Moves the calling thread into the router's namespace (see [`NetNs::enter_this_thread`]).
    pub fn enter_router(&self) {
        self.router.enter_this_thread();
    }

    /// Runs `f` on a thread of its own in the router's namespace (and the threads and
    /// processes it starts with it), and returns what it returns; a panic in `f` is
    /// raised again here. The caller's thread stays where it was.
    pub fn in_router<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("in the router".to_owned())
                .spawn_scoped(s, || {
                    self.enter_router();
                    f()
                })
                .expect("a thread")
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}
