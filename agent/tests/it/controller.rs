//! Controller operations the server assigns to this agent, against the plugin's controller.

use std::collections::BTreeMap;

use csivol_api::{ControllerOp, ControllerOpKind, Report};
use csivol_tests::{TestDir, is_mounted};

use super::support::{Agent, Hostpath, Vol, capability, config, desired};

fn op(id: u64, attempt: u32, not_before_ms: u64, kind: ControllerOpKind) -> ControllerOp {
    ControllerOp {
        id,
        attempt,
        plugin: "hp".into(),
        not_before_ms,
        kind,
    }
}

/// CreateVolume of `volume`, 1 MiB, with the plugin's defaults.
fn create_kind(volume: &str) -> ControllerOpKind {
    ControllerOpKind::Create {
        volume: volume.into(),
        capability: capability(),
        capacity_bytes: 1 << 20,
        parameters: BTreeMap::new(),
        secrets: BTreeMap::new(),
        topology_request: None,
        source: None,
        mutable_parameters: BTreeMap::new(),
        csi_name: None,
    }
}

fn with_ops(ops: Vec<ControllerOp>) -> csivol_api::DesiredState {
    let mut d = desired(vec![], vec![], vec![]);
    d.controller_ops = ops;
    d
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn op_report(agent: &mut Agent, id: u64, attempt: u32) -> Report {
    agent
        .wait(&format!("the report of op {id} attempt {attempt}"), |r| {
            matches!(r,
                Report::ControllerPublished { op, attempt: a, .. }
                | Report::ControllerUnpublished { op, attempt: a }
                | Report::Created { op, attempt: a, .. }
                | Report::Deleted { op, attempt: a }
                | Report::OpError { op, attempt: a, .. }
                if *op == id && *a == attempt)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_publish_unpublish_delete_through_the_hosted_controller() {
    let dir = TestDir::new("node-controller");
    let hp = Hostpath::start(&dir, "n1", &["--fail=CreateVolume=UNAVAILABLE:1"]);
    let mut cfg = config(&dir, vec![hp.spec("hp")]);
    cfg.controllers = vec![hp.spec("hp")];
    let mut agent = Agent::start(cfg).await;
    let reg = agent.core.registration(None);
    let caps = reg.plugins[0].controller.expect("controller capabilities");
    assert!(caps.create_delete_volume && caps.publish_unpublish_volume);
    assert!(reg.plugins[0].node.is_some());

    let create = |attempt, not_before_ms| op(1, attempt, not_before_ms, create_kind("v1"));
    agent.core.set_desired(with_ops(vec![create(0, 0)]));
    let Report::OpError { error, .. } = op_report(&mut agent, 1, 0).await else {
        panic!("attempt 0 fails: {:?}", agent.seen)
    };
    assert_eq!(error.code, "UNAVAILABLE");
    assert!(!error.is_final, "the server retries it");
    assert_eq!(error.next_retry_at_ms, None, "the server schedules retries");
    // The server offers it again, unchanged, then as attempt 1 after its backoff.
    agent.core.set_desired(with_ops(vec![create(0, 0)]));
    agent.core.idle().await;
    let not_before = now_ms() + 300;
    agent
        .core
        .set_desired(with_ops(vec![create(1, not_before)]));
    let Report::Created {
        external_id,
        capacity_bytes,
        context,
        ..
    } = op_report(&mut agent, 1, 1).await
    else {
        panic!("attempt 1 creates: {:?}", agent.seen)
    };
    assert_eq!(capacity_bytes, 1 << 20);
    let creates: Vec<_> = hp
        .calls()
        .into_iter()
        .filter(|c| c["rpc"] == "CreateVolume")
        .collect();
    assert_eq!(creates.len(), 2, "each attempt runs once: {creates:?}");
    assert!(creates[1]["at_ms"].as_u64().unwrap() >= not_before);

    let mut vol = Vol {
        name: "v1".into(),
        plugin: "hp".into(),
        external_id: external_id.clone(),
        context: context.clone(),
        publish_context: BTreeMap::new(),
    };
    agent.core.set_desired(with_ops(vec![op(
        2,
        0,
        0,
        ControllerOpKind::Publish {
            volume: "v1".into(),
            external_id: external_id.clone(),
            node_id: hp.node_id.clone(),
            capability: capability(),
            readonly: false,
            context: context.clone(),
            secrets: BTreeMap::new(),
        },
    )]));
    let Report::ControllerPublished {
        publish_context, ..
    } = op_report(&mut agent, 2, 0).await
    else {
        panic!("published: {:?}", agent.seen)
    };
    vol.publish_context = publish_context;

    // The node side uses the publish context the controller returned.
    agent
        .core
        .set_desired(desired(vec![vol.publish("a1")], vec![], vec![]));
    let target = agent.published(&vol, "a1").await;
    assert!(is_mounted(&target));
    agent
        .core
        .set_desired(desired(vec![], vec![vol.unpublish("a1")], vec![]));
    agent.unstaged(&vol).await;

    agent.core.set_desired(with_ops(vec![op(
        3,
        0,
        0,
        ControllerOpKind::Unpublish {
            volume: "v1".into(),
            external_id: external_id.clone(),
            node_id: hp.node_id.clone(),
            secrets: BTreeMap::new(),
        },
    )]));
    assert!(matches!(
        op_report(&mut agent, 3, 0).await,
        Report::ControllerUnpublished { .. }
    ));
    agent.core.set_desired(with_ops(vec![op(
        4,
        0,
        0,
        ControllerOpKind::Delete {
            volume: "v1".into(),
            external_id: external_id.clone(),
            secrets: BTreeMap::new(),
        },
    )]));
    assert!(matches!(
        op_report(&mut agent, 4, 0).await,
        Report::Deleted { .. }
    ));
    assert_eq!(hp.count("DeleteVolume", "OK"), 1);
    assert!(!hp.data_dir(&vol).exists());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_calls_per_plugin_stay_within_the_limit() {
    let dir = TestDir::new("node-controller-limit");
    let hp = Hostpath::start(&dir, "n1", &["--delay=CreateVolume=200ms"]);
    let mut cfg = config(&dir, vec![]);
    cfg.controllers = vec![hp.spec("hp")];
    cfg.controller_concurrency = 2;
    let mut agent = Agent::start(cfg).await;
    let ops = (0..5)
        .map(|i| op(i, 0, 0, create_kind(&format!("v{i}"))))
        .collect();
    agent.core.set_desired(with_ops(ops));
    for i in 0..5 {
        assert!(matches!(
            op_report(&mut agent, i, 0).await,
            Report::Created { .. }
        ));
    }
    let max = hp
        .calls()
        .iter()
        .filter(|c| c["rpc"] == "CreateVolume")
        .map(|c| c["in_flight"].as_u64().unwrap())
        .max();
    assert_eq!(max, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_for_a_controller_not_hosted_here_are_refused() {
    let dir = TestDir::new("node-controller-missing");
    let hp = Hostpath::start(&dir, "n1", &[]);
    let mut agent = Agent::start(config(&dir, vec![hp.spec("hp")])).await;
    assert_eq!(agent.core.registration(None).plugins[0].controller, None);
    agent.core.set_desired(with_ops(vec![op(
        7,
        0,
        0,
        ControllerOpKind::Delete {
            volume: "v".into(),
            external_id: "x".into(),
            secrets: BTreeMap::new(),
        },
    )]));
    let Report::OpError { error, .. } = op_report(&mut agent, 7, 0).await else {
        panic!("{:?}", agent.seen)
    };
    assert!(error.is_final);
    assert!(
        error.message.contains("--controller hp=ENDPOINT"),
        "{}",
        error.message
    );
    assert_eq!(hp.count("DeleteVolume", "OK"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_is_registered_and_create_lands_in_the_required_segment() {
    let dir = TestDir::new("node-controller-topology");
    // Two nodes of one storage system, in zones a and b; this agent runs the one in a.
    let hp = Hostpath::start(&dir, "n1", &["--topology=zone=a"]);
    let _other = Hostpath::start(&dir, "n2", &["--topology=zone=b"]);
    let mut cfg = config(&dir, vec![hp.spec("hp")]);
    cfg.controllers = vec![hp.spec("hp")];
    let mut agent = Agent::start(cfg).await;
    let reg = agent.core.registration(None);
    let node = reg.plugins[0].node.as_ref().expect("node service");
    let zone = |z: &str| -> csivol_api::Topology { [("zone".to_owned(), z.to_owned())].into() };
    assert_eq!(
        node.info.accessible_topology,
        Some(zone("a")),
        "NodeGetInfo's segments are carried in the registration"
    );
    assert!(reg.plugins[0].capabilities.volume_accessibility_constraints);

    let request = csivol_api::TopologyRequest {
        required: vec![zone("b")],
        preferred: vec![],
    };
    agent.core.set_desired(with_ops(vec![op(
        1,
        0,
        0,
        ControllerOpKind::Create {
            volume: "zonal".into(),
            capability: capability(),
            capacity_bytes: 0,
            parameters: BTreeMap::new(),
            secrets: BTreeMap::new(),
            topology_request: Some(request),
            source: None,
            mutable_parameters: BTreeMap::new(),
            csi_name: None,
        },
    )]));
    let Report::Created {
        accessible_topology,
        ..
    } = op_report(&mut agent, 1, 0).await
    else {
        panic!("the volume is created: {:?}", agent.seen)
    };
    // Without the requirement the plugin would have placed it in its controller's own
    // zone (a): zone b is the request, passed on.
    assert_eq!(
        accessible_topology,
        [zone("b")],
        "where CreateVolume put it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_controller_operation_starts_from_a_desired_state_the_server_may_have_overtaken() {
    let dir = TestDir::new("node-controller-stale");
    let hp = Hostpath::start(&dir, "n1", &[]);
    let mut cfg = config(&dir, vec![hp.spec("hp")]);
    cfg.controllers = vec![hp.spec("hp")];
    let mut agent = Agent::start(cfg).await;
    let create = op(7, 0, 0, create_kind("v7"));
    let creates = || {
        hp.calls()
            .into_iter()
            .filter(|c| c["rpc"] == "CreateVolume")
            .count()
    };
    // The last heartbeat answered was sent longer than a TTL ago (the agent was paused):
    // the server may have marked the node lost and given the operation to another host.
    let ttl = std::time::Duration::from_secs(1);
    let long_ago = std::time::Instant::now() - 3 * ttl;
    agent.core.heard(long_ago, ttl);
    let mut d = with_ops(vec![create.clone()]);
    d.generation = Some("00000000000000c3".into());
    agent.core.set_desired(d.clone());
    agent.core.idle().await;
    assert_eq!(creates(), 0, "nothing runs from a state that may be stale");

    // A registration answered since: the state at hand is from before it; the one
    // fetched after it is followed.
    agent.core.registered();
    agent.core.heard(std::time::Instant::now(), ttl);
    agent.core.idle().await;
    assert_eq!(
        creates(),
        0,
        "not before the state fetched after the registration"
    );
    agent.core.set_desired(d);
    let Report::Created { made_for, .. } = op_report(&mut agent, 7, 0).await else {
        panic!("created: {:?}", agent.seen)
    };
    assert_eq!(creates(), 1);
    // The answer says what it was asked for, so that a late one is still understood.
    let made = made_for.expect("what the call was asked for");
    assert_eq!((made.plugin.as_str(), made.volume.as_str()), ("hp", "v7"));
    assert_eq!(made.generation.as_deref(), Some("00000000000000c3"));
}
