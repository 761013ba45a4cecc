//! Fence policy, pure: which configured fence method applies to a node, the command it
//! runs for that node, and when the policy's automatic fence of a lost node is due.
//! Running the command is `fence`'s job; nothing here does I/O.
//!
//! How a node is fenced comes only from what an operator set: the config's `[node_labels]`
//! and `csivol node label`. A node's own agent reports labels too, but the node is the one
//! being fenced: were its labels believed, it could point its fence at another machine's
//! BMC, pick a method that leaves it running, or one that never runs. Fencing systems take
//! the device address from the cluster's configuration for the same reason (Pacemaker's
//! stonith devices, for one). An agent's label may select a method only where the
//! operator trusts that key for that method (`trust_agent_labels`), and never fills a
//! command.

use std::collections::{BTreeMap, BTreeSet};
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
    /// Keys of `labels` that a node's agent may set for itself when no operator did (a
    /// `rack` the machine reports): it then chooses whether this method applies to it.
    /// Never a key the command uses (`{bmc}`): refused.
    #[serde(default)]
    pub trust_agent_labels: Vec<String>,
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
    pub trust_agent_labels: BTreeSet<String>,
}

/// A node's labels, by who set them.
#[derive(Debug, Clone, Copy)]
pub struct Labels<'a> {
    /// Set by an operator: the config's `[node_labels]` and `csivol node label`.
    pub operator: &'a BTreeMap<String, String>,
    /// Reported by the node's own agent.
    pub agent: &'a BTreeMap<String, String>,
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
        let filled = placeholders(&c.command);
        for key in &c.trust_agent_labels {
            if filled.contains(key.as_str()) {
                return Err(format!(
                    "{what} trusts the agent's label `{key}`, which fills `{{{key}}}` in its command: a node would choose the machine its fence acts on; remove it from `trust_agent_labels` and set `{key}` per node under [node_labels.NODE] or with `csivol node label NODE {key}=...`"
                ));
            }
            if !c.labels.contains_key(key) {
                return Err(format!(
                    "{what} trusts the agent's label `{key}`, which its `labels` do not select by: trusting it would change nothing; remove it from `trust_agent_labels`"
                ));
            }
        }
        csivol_api::check_map("labels", &c.labels).map_err(|e| format!("{what}: {e}"))?;
        Ok(Self {
            auto_fence_after: duration("auto_fence_after", &c.auto_fence_after)?,
            name: c.name,
            command: c.command,
            timeout,
            nodes: c.nodes,
            labels: c.labels,
            env: c.env,
            trust_agent_labels: c.trust_agent_labels.into_iter().collect(),
        })
    }

    /// A label as this method may read it: the operator's, or for a key the method trusts,
    /// the agent's when no operator set it.
    fn label<'a>(&self, key: &str, labels: Labels<'a>) -> Option<&'a String> {
        labels.operator.get(key).or_else(|| {
            self.trust_agent_labels
                .contains(key)
                .then(|| labels.agent.get(key))
                .flatten()
        })
    }

    /// Whether this method fences `node`: its name matches one of the patterns (or there
    /// are none) and it has every required label (see [`FenceMethod::label`]).
    pub fn applies(&self, node: &str, labels: Labels<'_>) -> bool {
        let named = self.nodes.is_empty() || self.nodes.iter().any(|p| glob(p, node));
        named
            && self
                .labels
                .iter()
                .all(|(k, v)| self.label(k, labels).is_some_and(|have| have == v))
    }

    /// The command for `node`: `{node}` is its name, `{KEY}` its operator label KEY;
    /// otherwise the keys no operator set.
    pub fn render(
        &self,
        node: &str,
        operator: &BTreeMap<String, String>,
    ) -> Result<Vec<String>, Vec<String>> {
        let mut lacking = Vec::new();
        let mut out = Vec::new();
        for arg in &self.command {
            match fill(arg, node, operator) {
                Ok(a) => out.push(a),
                Err(keys) => {
                    for k in keys {
                        if !lacking.contains(&k) {
                            lacking.push(k);
                        }
                    }
                }
            }
        }
        if lacking.is_empty() {
            Ok(out)
        } else {
            Err(lacking)
        }
    }

    /// The command's environment for `node`: `CSIVOL_FENCE_NODE`, `CSIVOL_FENCE_METHOD`,
    /// `CSIVOL_FENCE_LABEL_<KEY>` (upper case, `-` and `.` as `_`) for its operator labels
    /// (a script may aim with them, so an agent's never), then the method's own.
    pub fn environment(
        &self,
        node: &str,
        operator: &BTreeMap<String, String>,
    ) -> Vec<(String, String)> {
        let mut env = vec![
            ("CSIVOL_FENCE_NODE".to_owned(), node.to_owned()),
            ("CSIVOL_FENCE_METHOD".to_owned(), self.name.clone()),
        ];
        for (k, v) in operator {
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

/// What fencing can do for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice<'a> {
    /// This method applies and its command is complete.
    Ready {
        method: &'a FenceMethod,
        command: Vec<String>,
    },
    /// This method applies, but its command needs labels no operator set for the node.
    /// Nothing fills them from elsewhere: the method does not run.
    Lacks {
        method: &'a FenceMethod,
        labels: Vec<String>,
    },
    /// No method applies. `by_agent` is the first that would, had the agent's labels been
    /// believed, with the labels that would have chosen it (for the operator to check).
    None {
        by_agent: Option<(&'a FenceMethod, Vec<(String, String)>)>,
    },
}

impl Choice<'_> {
    pub fn method(&self) -> Option<&FenceMethod> {
        match self {
            Self::Ready { method, .. } => Some(method),
            _ => None,
        }
    }
}

/// The server's fencing settings: methods in the config's order, and the operator's
/// per-node labels from the config file.
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
        for (node, labels) in &node_labels {
            csivol_api::validate_name("node", node).map_err(|e| format!("[node_labels]: {e}"))?;
            csivol_api::check_map(&format!("node_labels.{node}"), labels)
                .map_err(|e| e.to_string())?;
        }
        Ok(Self {
            methods: out,
            node_labels,
        })
    }

    /// The labels an operator set for `node`: those set with `csivol node label` (`set`)
    /// and the config file's `[node_labels.<node>]`, which the API does not change.
    pub fn operator_labels(
        &self,
        node: &str,
        set: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut out = set.clone();
        if let Some(c) = self.node_labels.get(node) {
            out.extend(c.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        out
    }

    /// The config file's labels of `node`.
    pub fn configured(&self, node: &str) -> Option<&BTreeMap<String, String>> {
        self.node_labels.get(node)
    }

    /// How `node` is fenced: the first method, in the config's order, that applies to it
    /// ([`FenceMethod::applies`]), with its command filled from operator labels only.
    pub fn choose(&self, node: &str, labels: Labels<'_>) -> Choice<'_> {
        let Some(method) = select(&self.methods, node, labels) else {
            return Choice::None {
                by_agent: self.by_agent(node, labels),
            };
        };
        match method.render(node, labels.operator) {
            Ok(command) => Choice::Ready { method, command },
            Err(lacking) => Choice::Lacks {
                method,
                labels: lacking,
            },
        }
    }

    /// The method the agent's labels would have chosen, had they all been believed.
    fn by_agent<'a>(
        &'a self,
        node: &str,
        labels: Labels<'_>,
    ) -> Option<(&'a FenceMethod, Vec<(String, String)>)> {
        let mut all = labels.agent.clone();
        all.extend(labels.operator.iter().map(|(k, v)| (k.clone(), v.clone())));
        let believed = Labels {
            operator: &all,
            agent: labels.agent,
        };
        let m = select(&self.methods, node, believed)?;
        let from_agent = m
            .labels
            .keys()
            .filter(|k| !labels.operator.contains_key(*k))
            .map(|k| (k.clone(), all[k].clone()))
            .collect();
        Some((m, from_agent))
    }
}

/// The first method, in the config's order, that applies to the node.
pub fn select<'a>(
    methods: &'a [FenceMethod],
    node: &str,
    labels: Labels<'_>,
) -> Option<&'a FenceMethod> {
    methods.iter().find(|m| m.applies(node, labels))
}

/// The keys `{KEY}` stands for in a command (not `{node}`).
fn placeholders(command: &[String]) -> BTreeSet<String> {
    let none = BTreeMap::new();
    command
        .iter()
        .filter_map(|arg| fill(arg, "", &none).err())
        .flatten()
        .collect()
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

/// Whether `key` can stand in a command as `{KEY}`: letters, digits, `_`, `-`, `.`.
pub fn is_label_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Fills `{node}` and `{KEY}` in one argument; the missing keys otherwise. Only braces
/// around a plain key (letters, digits, `_`, `-`, `.`) are a placeholder, so that a shell
/// snippet's `{ ...; }` passes through as written.
fn fill(arg: &str, node: &str, labels: &BTreeMap<String, String>) -> Result<String, Vec<String>> {
    let mut out = String::new();
    let mut missing = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').map(|close| &after[..close]) {
            Some(key) if is_label_key(key) => {
                match (key, labels.get(key)) {
                    ("node", _) => out.push_str(node),
                    (_, Some(v)) => out.push_str(v),
                    (_, None) => missing.push(key.to_owned()),
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
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
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
            labels: l(labels),
            env: BTreeMap::new(),
            auto_fence_after: None,
            trust_agent_labels: BTreeSet::new(),
        }
    }

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn config(methods: Vec<FenceMethod>) -> FenceConfig {
        FenceConfig {
            methods,
            node_labels: BTreeMap::new(),
        }
    }

    #[test]
    fn which_method_applies() {
        let methods = [
            method("rack4", &["node-*"], &[("rack", "4")]),
            method("named", &["db-?", "db-1", "web-*-a"], &[]),
            method("any-ipmi", &[], &[("kind", "ipmi")]),
        ];
        // (node, operator labels, method)
        type Pairs<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(&str, Pairs<'_>, Option<&str>)] = &[
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
            let operator = l(labels);
            let on_its_own = Labels {
                operator: &operator,
                agent: &BTreeMap::new(),
            };
            let got = select(&methods, node, on_its_own).map(|m| m.name.as_str());
            assert_eq!(got, *want, "{node} {labels:?}");
        }
    }

    /// Whatever its agent reports, a node is fenced the same way: the same method, the
    /// same command, or none. Each case is (operator labels, what the agent says).
    #[test]
    fn a_nodes_own_labels_change_nothing() {
        let c = config(vec![
            method("maintenance", &[], &[("maintenance", "yes")]),
            method("rack4", &["node-*"], &[("rack", "4")]),
            method("rack5", &["node-*"], &[("rack", "5")]),
        ]);
        let lies = [
            l(&[]),
            l(&[("bmc", "10.0.0.1")]),
            l(&[("rack", "5"), ("bmc", "10.0.0.1")]),
            l(&[("maintenance", "yes")]),
            l(&[("rack", "4"), ("bmc", "10.0.0.9"), ("maintenance", "no")]),
        ];
        let operators = [
            l(&[]),
            l(&[("bmc", "10.0.0.2")]),
            l(&[("rack", "4")]),
            l(&[("rack", "4"), ("bmc", "10.0.0.2")]),
        ];
        for operator in &operators {
            let honest = Labels {
                operator,
                agent: &BTreeMap::new(),
            };
            let want = match c.choose("node-2", honest) {
                Choice::None { .. } => Choice::None { by_agent: None },
                other => other,
            };
            for agent in &lies {
                let got = match c.choose("node-2", Labels { operator, agent }) {
                    Choice::None { .. } => Choice::None { by_agent: None },
                    other => other,
                };
                assert_eq!(got, want, "operator {operator:?}, agent {agent:?}");
            }
        }
    }

    #[test]
    fn what_fencing_can_do_for_a_node() {
        let mut rack = method("pdu-rack5", &[], &[("rack", "5")]);
        rack.command = vec!["pdu".into(), "--outlet".into(), "{outlet}".into()];
        let c = config(vec![method("ipmi", &["node-*"], &[]), rack]);
        let choose = |node: &str, operator: &[(&str, &str)], agent: &[(&str, &str)]| {
            let (operator, agent) = (l(operator), l(agent));
            match c.choose(
                node,
                Labels {
                    operator: &operator,
                    agent: &agent,
                },
            ) {
                Choice::Ready { method, command } => {
                    format!("{}: {}", method.name, command.join(" "))
                }
                Choice::Lacks { method, labels } => csivol_api::FenceLacks {
                    method: method.name.clone(),
                    labels,
                }
                .describe(node),
                Choice::None { by_agent: None } => "none".to_owned(),
                Choice::None {
                    by_agent: Some((m, ls)),
                } => format!("none; {} by the agent's {ls:?}", m.name),
            }
        };
        assert_eq!(
            choose("node-2", &[("bmc", "10.0.0.2")], &[("bmc", "10.0.0.1")]),
            "ipmi: /bin/fence --ip 10.0.0.2 node-2"
        );
        assert_eq!(
            choose("node-2", &[], &[("bmc", "10.0.0.1")]),
            "method ipmi lacks label bmc for node-2: csivol node label node-2 bmc=…"
        );
        assert_eq!(
            choose("db-1", &[], &[("rack", "5")]),
            r#"none; pdu-rack5 by the agent's [("rack", "5")]"#
        );
        assert_eq!(
            choose("db-1", &[("rack", "5")], &[]),
            "method pdu-rack5 lacks label outlet for db-1: csivol node label db-1 outlet=…"
        );
        assert_eq!(choose("db-1", &[("rack", "4")], &[("rack", "5")]), "none");
        let two = csivol_api::FenceLacks {
            method: "m".into(),
            labels: vec!["bmc".into(), "port".into()],
        };
        assert_eq!(
            two.describe("n"),
            "method m lacks labels bmc, port for n: csivol node label n bmc=… port=…"
        );
    }

    #[test]
    fn a_trusted_agent_label_selects_but_never_fills() {
        let mut m = method("rack4", &[], &[("rack", "4")]);
        m.trust_agent_labels.insert("rack".into());
        let c = config(vec![m]);
        let (none, bmc) = (l(&[]), l(&[("bmc", "10.0.0.2")]));
        let agent = l(&[("rack", "4"), ("bmc", "10.0.0.1")]);
        match c.choose(
            "n",
            Labels {
                operator: &bmc,
                agent: &agent,
            },
        ) {
            Choice::Ready { command, .. } => assert_eq!(command[2], "10.0.0.2"),
            other => panic!("{other:?}"),
        }
        match c.choose(
            "n",
            Labels {
                operator: &none,
                agent: &agent,
            },
        ) {
            Choice::Lacks { labels, .. } => assert_eq!(labels, ["bmc"]),
            other => panic!("{other:?}"),
        }
        // The operator's rack wins over the agent's.
        let rack5 = l(&[("rack", "5"), ("bmc", "10.0.0.2")]);
        assert!(
            c.choose(
                "n",
                Labels {
                    operator: &rack5,
                    agent: &agent
                }
            )
            .method()
            .is_none()
        );
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
        assert_eq!(m.render("n1", &l(&[])).unwrap_err(), ["bmc"]);
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
        assert_eq!(
            placeholders(&["{bmc}:{port}".into(), "{node}".into(), "{ x; }".into()]),
            ["bmc".to_owned(), "port".to_owned()].into_iter().collect()
        );
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
    fn the_config_files_labels_win() {
        let c = FenceConfig::new(
            Vec::new(),
            [("node-2".to_owned(), l(&[("bmc", "10.0.0.11")]))]
                .into_iter()
                .collect(),
        )
        .unwrap();
        let set = l(&[("bmc", "10.0.0.99"), ("zone", "a")]);
        assert_eq!(
            c.operator_labels("node-2", &set),
            l(&[("bmc", "10.0.0.11"), ("zone", "a")])
        );
        assert_eq!(c.operator_labels("node-3", &set), set);
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
            trust_agent_labels: Vec::new(),
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
        let trusting = |keys: &[&str]| FenceMethodConfig {
            labels: l(&[("rack", "4")]),
            trust_agent_labels: keys.iter().map(|k| (*k).to_owned()).collect(),
            ..c(&["fence_ipmilan", "--ip", "{bmc}", "--rack={rack}"], None)
        };
        let err = FenceMethod::from_config(trusting(&["bmc"])).unwrap_err();
        assert!(
            err.starts_with("fence method `m` trusts the agent's label `bmc`, which fills `{bmc}` in its command"),
            "{err}"
        );
        let err = FenceMethod::from_config(trusting(&["rack"])).unwrap_err();
        assert!(err.contains("which fills `{rack}`"), "{err}");
        let err = FenceMethod::from_config(trusting(&["zone"])).unwrap_err();
        assert!(err.contains("which its `labels` do not select by"), "{err}");
        let ok = FenceMethodConfig {
            command: vec!["fence_ipmilan".into(), "--ip".into(), "{bmc}".into()],
            ..trusting(&["rack"])
        };
        let m = FenceMethod::from_config(ok).unwrap();
        assert!(m.trust_agent_labels.contains("rack"));
    }
}
