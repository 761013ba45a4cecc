//! Fence policy, pure: which configured fence method applies to a node, the command it
//! runs for that node, and when the policy's automatic fence of a lost node is due.
//! Running the command is `fence`'s job; nothing here does I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use csivol_api::NodeStatus;
use serde::Deserialize;

/// Default time a fence command may take before it is killed and counts as failed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A fence method as written in the server's TOML config (`[[fence]]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FenceMethodConfig {
    pub name: String,
    /// The program and its arguments; `{node}` and `{LABEL}` are filled in per node.
    pub command: Vec<String>,
    /// `30s`; default 60s.
    pub timeout: Option<String>,
    /// Name patterns (`*` matches any run of characters) of the nodes it fences.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Labels a node must have (all of them, with these values).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Extra environment of the command (a BMC password); values are never shown.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Opt-in policy: fence a node of this group itself once it has been lost this long.
    pub auto_fence_after: Option<String>,
}

/// A validated fence method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceMethod {
    pub name: String,
    pub command: Vec<String>,
    pub timeout: Duration,
    pub nodes: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub auto_fence_after: Option<Duration>,
}

impl FenceMethod {
    pub fn from_config(c: FenceMethodConfig) -> Result<Self, String> {
        let what = format!("fence method `{}`", c.name);
        csivol_api::validate_name("fence method", &c.name)?;
        if c.command.is_empty() || c.command[0].trim().is_empty() {
            return Err(format!("{what} has an empty `command`"));
        }
        let duration = |field: &str, v: &Option<String>| -> Result<Option<Duration>, String> {
            v.as_deref()
                .map(|s| {
                    humantime::parse_duration(s)
                        .map_err(|e| format!("{what}: invalid {field} `{s}`: {e}"))
                })
                .transpose()
        };
        let timeout = duration("timeout", &c.timeout)?.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            return Err(format!("{what}: timeout must be more than 0s"));
        }
        Ok(Self {
            auto_fence_after: duration("auto_fence_after", &c.auto_fence_after)?,
            name: c.name,
            command: c.command,
            timeout,
            nodes: c.nodes,
            labels: c.labels,
            env: c.env,
        })
    }

    /// Whether this method fences `node`: its name matches one of the patterns (or there
    /// are none) and it has every required label.
    pub fn applies(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        let named = self.nodes.is_empty() || self.nodes.iter().any(|p| glob(p, node));
        named
            && self
                .labels
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
    }

    /// The command for `node`: `{node}` is its name, `{KEY}` its label KEY.
    pub fn render(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<String>, String> {
        self.command
            .iter()
            .map(|arg| fill(arg, node, labels).map_err(|key| {
                format!(
                    "fence method `{}` needs the label `{key}` of node {node}, which it does not have",
                    self.name
                )
            }))
            .collect()
    }

    /// The command's environment for `node`: `CSIVOL_FENCE_NODE`, `CSIVOL_FENCE_METHOD`,
    /// `CSIVOL_FENCE_LABEL_<KEY>` (upper case, `-` and `.` as `_`), then the method's own.
    pub fn environment(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<(String, String)> {
        let mut env = vec![
            ("CSIVOL_FENCE_NODE".to_owned(), node.to_owned()),
            ("CSIVOL_FENCE_METHOD".to_owned(), self.name.clone()),
        ];
        for (k, v) in labels {
            let key: String = k
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            env.push((format!("CSIVOL_FENCE_LABEL_{key}"), v.clone()));
        }
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }
}

/// The server's fencing settings: methods in the config's order, and per-node labels.
#[derive(Debug, Clone, Default)]
pub struct FenceConfig {
    pub methods: Vec<FenceMethod>,
    pub node_labels: BTreeMap<String, BTreeMap<String, String>>,
}

impl FenceConfig {
    pub fn new(
        methods: Vec<FenceMethodConfig>,
        node_labels: BTreeMap<String, BTreeMap<String, String>>,
    ) -> Result<Self, String> {
        let mut out: Vec<FenceMethod> = Vec::new();
        for m in methods {
            let m = FenceMethod::from_config(m)?;
            if out.iter().any(|o| o.name == m.name) {
                return Err(format!("fence method `{}` is defined twice", m.name));
            }
            out.push(m);
        }
        Ok(Self {
            methods: out,
            node_labels,
        })
    }

    /// The node's labels: its agent's, overridden by `[node_labels.<node>]`.
    pub fn labels_of(
        &self,
        node: &str,
        reported: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        labels(reported, self.node_labels.get(node))
    }

    pub fn method_for(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<&FenceMethod> {
        select(&self.methods, node, labels)
    }
}

/// The first method, in the config's order, that applies to the node.
pub fn select<'a>(
    methods: &'a [FenceMethod],
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Option<&'a FenceMethod> {
    methods.iter().find(|m| m.applies(node, labels))
}

/// A node's labels: what its agent reported, overridden by the operator's `[node_labels]`
/// (an agent must not be able to point its fence at another machine's BMC).
pub fn labels(
    reported: &BTreeMap<String, String>,
    configured: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut out = reported.clone();
    if let Some(c) = configured {
        out.extend(c.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    out
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| glob(rest, &tail[i..]))
        }
    }
}

/// Fills `{node}` and `{KEY}` in one argument; the missing key otherwise. Only braces
/// around a plain key (letters, digits, `_`, `-`, `.`) are a placeholder, so that a shell
/// snippet's `{ ...; }` passes through as written.
fn fill(arg: &str, node: &str, labels: &BTreeMap<String, String>) -> Result<String, String> {
    let is_key = |k: &str| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    let mut out = String::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').map(|close| &after[..close]) {
            Some(key) if is_key(key) => {
                match (key, labels.get(key)) {
                    ("node", _) => out.push_str(node),
                    (_, Some(v)) => out.push_str(v),
                    (_, None) => return Err(key.to_owned()),
                }
                rest = &after[key.len() + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// What the policy says of a node now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auto {
    /// No automatic fence: the method has no `auto_fence_after`, or the node is not lost.
    Off,
    /// Due at this time (unix ms).
    At(i64),
    /// Due now.
    Due,
}

/// The facts the policy looks at, for one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFacts {
    pub status: NodeStatus,
    pub lost_at: Option<i64>,
    /// Failed automatic fences since it was lost.
    pub failures: u32,
    /// When the last of them ended.
    pub last_failure_at: Option<i64>,
}

/// When the policy fences a node: `auto_fence_after` after it was lost, then after each
/// failure with backoff ([`retry_backoff`]).
pub fn auto_fence(method: &FenceMethod, n: NodeFacts, now: i64) -> Auto {
    let (Some(after), NodeStatus::Lost, Some(lost_at)) =
        (method.auto_fence_after, n.status, n.lost_at)
    else {
        return Auto::Off;
    };
    let first = lost_at.saturating_add(after.as_millis() as i64);
    let at = match (n.failures, n.last_failure_at) {
        (0, _) | (_, None) => first,
        (f, Some(last)) => first.max(last.saturating_add(retry_backoff(f).as_millis() as i64)),
    };
    if now >= at { Auto::Due } else { Auto::At(at) }
}

/// Time before the next automatic attempt after `failures` failed ones: 2 s doubling,
/// at most 5 min.
pub fn retry_backoff(failures: u32) -> Duration {
    let secs = 2u64.saturating_mul(1u64 << failures.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn method(name: &str, nodes: &[&str], labels: &[(&str, &str)]) -> FenceMethod {
        FenceMethod {
            name: name.into(),
            command: vec![
                "/bin/fence".into(),
                "--ip".into(),
                "{bmc}".into(),
                "{node}".into(),
            ],
            timeout: Duration::from_secs(5),
            nodes: nodes.iter().map(|s| (*s).to_owned()).collect(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            env: BTreeMap::new(),
            auto_fence_after: None,
        }
    }

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn which_method_applies() {
        let methods = [
            method("rack4", &["node-*"], &[("rack", "4")]),
            method("named", &["db-?", "db-1", "web-*-a"], &[]),
            method("any-ipmi", &[], &[("kind", "ipmi")]),
        ];
        // (node, labels, method)
        type Labels<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(&str, Labels<'_>, Option<&str>)] = &[
            ("node-1", &[("rack", "4")], Some("rack4")),
            ("node-1", &[("rack", "5")], None),
            (
                "node-1",
                &[("rack", "5"), ("kind", "ipmi")],
                Some("any-ipmi"),
            ),
            ("node-1", &[], None),
            ("db-1", &[], Some("named")),
            ("db-2", &[], None),
            ("web-x-a", &[], Some("named")),
            ("web--a", &[], Some("named")),
            ("web-x-b", &[], None),
            ("node-1", &[("rack", "4"), ("kind", "ipmi")], Some("rack4")),
        ];
        for (node, labels, want) in cases {
            let got = select(&methods, node, &l(labels)).map(|m| m.name.as_str());
            assert_eq!(got, *want, "{node} {labels:?}");
        }
    }

    #[test]
    fn globs() {
        for (p, n, want) in [
            ("*", "", true),
            ("*", "abc", true),
            ("a*c", "abc", true),
            ("a*c", "ac", true),
            ("a*c", "abd", false),
            ("*-1", "node-1", true),
            ("*-1", "node-11", false),
            ("n*-*-z", "n-a-b-z", true),
            ("node", "node-1", false),
        ] {
            assert_eq!(glob(p, n), want, "{p} {n}");
        }
    }

    #[test]
    fn commands_are_filled_per_node() {
        let m = method("ipmi", &[], &[]);
        assert_eq!(
            m.render("n1", &l(&[("bmc", "10.0.0.11")])).unwrap(),
            ["/bin/fence", "--ip", "10.0.0.11", "n1"]
        );
        let err = m.render("n1", &l(&[])).unwrap_err();
        assert_eq!(
            err,
            "fence method `ipmi` needs the label `bmc` of node n1, which it does not have"
        );
        // (argument, filled)
        let cases = [
            ("a{b", "a{b"),
            ("{node}:{node}", "n:n"),
            (
                "test -e m || { echo no; exit 3; }",
                "test -e m || { echo no; exit 3; }",
            ),
            ("{ {bmc} }", "{ 10.0.0.11 }"),
            ("x{}y{bmc}", "x{}y10.0.0.11"),
            ("{{node}}", "{n}"),
        ];
        for (arg, want) in cases {
            assert_eq!(
                fill(arg, "n", &l(&[("bmc", "10.0.0.11")])).unwrap(),
                want,
                "{arg}"
            );
        }
        let mut m = m;
        m.env.insert("IPMI_PASSWORD".into(), "hunter2".into());
        assert_eq!(
            m.environment("n1", &l(&[("bmc-addr", "x")])),
            [
                ("CSIVOL_FENCE_NODE".to_owned(), "n1".to_owned()),
                ("CSIVOL_FENCE_METHOD".into(), "ipmi".into()),
                ("CSIVOL_FENCE_LABEL_BMC_ADDR".into(), "x".into()),
                ("IPMI_PASSWORD".into(), "hunter2".into()),
            ]
        );
    }

    #[test]
    fn the_operators_labels_win() {
        let agent = l(&[("bmc", "10.0.0.99"), ("zone", "a")]);
        let configured = l(&[("bmc", "10.0.0.11")]);
        assert_eq!(
            labels(&agent, Some(&configured)),
            l(&[("bmc", "10.0.0.11"), ("zone", "a")])
        );
        assert_eq!(labels(&agent, None), agent);
    }

    #[test]
    fn when_the_policy_fences() {
        let mut m = method("ipmi", &[], &[]);
        let lost = |failures, last_failure_at| NodeFacts {
            status: NodeStatus::Lost,
            lost_at: Some(1_000),
            failures,
            last_failure_at,
        };
        assert_eq!(
            auto_fence(&m, lost(0, None), 999_999),
            Auto::Off,
            "not configured"
        );
        m.auto_fence_after = Some(Duration::from_secs(120));
        // (facts, now, expected)
        let cases = [
            (lost(0, None), 1_000, Auto::At(121_000)),
            (lost(0, None), 120_999, Auto::At(121_000)),
            (lost(0, None), 121_000, Auto::Due),
            (lost(1, Some(125_000)), 126_000, Auto::At(127_000)),
            (lost(1, Some(125_000)), 127_000, Auto::Due),
            (lost(3, Some(200_000)), 205_000, Auto::At(208_000)),
            (lost(20, Some(200_000)), 499_999, Auto::At(500_000)),
            (
                NodeFacts {
                    status: NodeStatus::Ready,
                    ..lost(0, None)
                },
                999_999,
                Auto::Off,
            ),
            (
                NodeFacts {
                    status: NodeStatus::Fenced,
                    ..lost(0, None)
                },
                999_999,
                Auto::Off,
            ),
        ];
        for (facts, now, want) in cases {
            assert_eq!(auto_fence(&m, facts, now), want, "{facts:?} at {now}");
        }
    }

    #[test]
    fn config_is_checked() {
        let c = |command: &[&str], timeout: Option<&str>| FenceMethodConfig {
            name: "m".into(),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            timeout: timeout.map(Into::into),
            nodes: vec![],
            labels: BTreeMap::new(),
            env: BTreeMap::new(),
            auto_fence_after: Some("2m".into()),
        };
        let m = FenceMethod::from_config(c(&["/bin/true"], None)).unwrap();
        assert_eq!(m.timeout, DEFAULT_TIMEOUT);
        assert_eq!(m.auto_fence_after, Some(Duration::from_secs(120)));
        assert_eq!(
            FenceMethod::from_config(c(&[], None)).unwrap_err(),
            "fence method `m` has an empty `command`"
        );
        let err = FenceMethod::from_config(c(&["x"], Some("soon"))).unwrap_err();
        assert!(
            err.starts_with("fence method `m`: invalid timeout `soon`"),
            "{err}"
        );
    }
}
