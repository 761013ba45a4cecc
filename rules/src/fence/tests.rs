//! The fence decisions' cases: which method a node's labels choose, what fills its
//! command, and when the policy fences.

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
        err.starts_with(
            "fence method `m` trusts the agent's label `bmc`, which fills `{bmc}` in its command"
        ),
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
