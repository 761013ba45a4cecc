//! The desired state of a node.

use csivol_api::{ClaimMode, Report};

use super::Env;

#[tokio::test]
async fn the_desired_state_lists_what_to_publish_unpublish_unstage_and_run() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    for v in ["ready", "releasing", "unstaging", "attaching"] {
        env.volume(v, "single-node-writer").await;
    }
    env.ready_claim("ready", "a1", "n1").await;
    env.ready_claim("releasing", "a2", "n1").await;
    env.release("releasing", "a2").await.unwrap();
    env.ready_claim("unstaging", "a3", "n1").await;
    env.release("unstaging", "a3").await.unwrap();
    env.report(
        "n1",
        vec![Report::Unpublished {
            volume: "unstaging".into(),
            alloc: "a3".into(),
        }],
    )
    .await;
    env.claim("attaching", "a4", "n1", ClaimMode::Write)
        .await
        .unwrap();

    let d = env.read(|c| super::super::desired_state(c, "n1", 7)).await;
    assert_eq!(d.index, 7);
    let publish: Vec<_> = d
        .publish
        .iter()
        .map(|p| (p.volume.volume.as_str(), p.alloc.as_str()))
        .collect();
    assert_eq!(
        publish,
        [("ready", "a1")],
        "an attaching claim is not published yet"
    );
    assert_eq!(
        d.publish[0].volume.publish_context["device"], "/dev/ready",
        "with the controller's publish context"
    );
    let unpublish: Vec<_> = d.unpublish.iter().map(|u| u.alloc.as_str()).collect();
    assert_eq!(unpublish, ["a2"]);
    let unstage: Vec<_> = d.unstage.iter().map(|u| u.volume.as_str()).collect();
    assert_eq!(unstage, ["unstaging"]);
    assert_eq!(d.unstage[0].external_id, "ext-unstaging");
    assert_eq!(
        d.controller_ops.len(),
        1,
        "the publish of `attaching`, run by n1"
    );
    assert_eq!(d.controller_ops[0].plugin, "hp");

    let e = env
        .db
        .read(|c| super::super::desired_state(c, "nobody", 1))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "not_found");
}

/// The state an agent holds by following the changes since its index equals the whole
/// state at every step, and each answer names only the volumes that changed.
#[tokio::test]
async fn changes_since_an_index_keep_the_agent_s_state_whole() {
    use crate::watch::Key;

    let env = Env::new();
    env.register("n1", true, &[]).await;
    for v in ["idle", "ready", "releasing", "attaching"] {
        env.volume(v, "single-node-writer").await;
    }
    env.ready_claim("idle", "a0", "n1").await;
    let key = Key::Node("n1".to_owned());
    let index = env.db.hub.index(&key);
    let mut held = env
        .read(move |c| super::super::desired_state(c, "n1", index))
        .await;

    // Follows the changes since `held`, checks them against the whole state, and returns
    // the volumes they named.
    async fn follow(env: &Env, held: &mut csivol_api::DesiredState) -> Vec<String> {
        let index = env.db.hub.index(&Key::Node("n1".to_owned()));
        let since = held.index;
        let volumes = env
            .db
            .hub
            .node_changes("n1", since)
            .expect("the journal covers the changes");
        let changes = env
            .read(move |c| super::super::desired_changes(c, "n1", index, since, volumes))
            .await;
        let named = changes.changes.clone().unwrap().volumes;
        held.apply(changes).unwrap();
        let whole = env
            .read(move |c| super::super::desired_state(c, "n1", index))
            .await;
        assert_eq!(*held, whole);
        named
    }

    env.ready_claim("ready", "a1", "n1").await;
    assert_eq!(follow(&env, &mut held).await, ["ready"]);
    env.ready_claim("releasing", "a2", "n1").await;
    env.release("releasing", "a2").await.unwrap();
    assert_eq!(follow(&env, &mut held).await, ["releasing"]);
    env.claim("attaching", "a4", "n1", ClaimMode::Write)
        .await
        .unwrap();
    assert_eq!(
        follow(&env, &mut held).await,
        ["attaching"],
        "the controller operation travels whole, the volume as its own change"
    );
    assert_eq!(held.controller_ops.len(), 1);
    env.report(
        "n1",
        vec![Report::Unpublished {
            volume: "releasing".into(),
            alloc: "a2".into(),
        }],
    )
    .await;
    assert_eq!(follow(&env, &mut held).await, ["releasing"]);
    assert_eq!(held.unstage.len(), 1, "releasing is unstaged next");
    assert_eq!(follow(&env, &mut held).await, Vec::<String>::new());
    let publish: Vec<_> = held.publish.iter().map(|p| p.alloc.as_str()).collect();
    assert_eq!(publish, ["a0", "a1"]);

    // A change to the node as a whole (here a registration) is not named by volume: the
    // agent is told to fetch the whole state.
    let since = held.index;
    env.register("n1", true, &[("idle", "a0"), ("ready", "a1")])
        .await;
    assert_eq!(env.db.hub.node_changes("n1", since), None);
}

#[tokio::test]
async fn the_node_is_woken_when_a_claim_s_entry_changes_not_when_it_becomes_ready() {
    use crate::watch::Key;

    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    let node = Key::Node("n1".to_owned());
    let volume = Key::Volume("v".to_owned());
    let before_attach = env.db.hub.index(&node);
    env.controller_published("n1").await;
    let publishing = env.db.hub.index(&node);
    assert!(
        publishing > before_attach,
        "attached: the claim is to publish"
    );

    // Its own report makes the claim ready: the node's entry for it is the same publish,
    // so its agent is not sent it again; the claim's watchers are told.
    let volume_before = env.db.hub.index(&volume);
    env.report("n1", vec![super::published("v", "a1")]).await;
    assert_eq!(
        env.db.hub.index(&node),
        publishing,
        "ready leaves the entry"
    );
    assert!(env.db.hub.index(&volume) > volume_before);

    env.release("v", "a1").await.unwrap();
    assert!(
        env.db.hub.index(&node) > publishing,
        "released: the claim is to unpublish"
    );
}

/// GetCapacity is asked by the node that hosts the plugin's controller, when the plugin
/// reports GET_CAPACITY, and by no other node: its desired state alone carries the queries.
#[tokio::test]
async fn only_the_controller_s_host_is_asked_for_capacity() {
    let env = Env::new();
    env.register("n2", false, &[]).await;
    let d = env.read(|c| super::super::desired_state(c, "n2", 1)).await;
    assert!(
        d.capacity.is_empty(),
        "no host, no capacity: {:?}",
        d.capacity
    );

    let mut req = super::registration("n1", true, &[]);
    if let Some(c) = req.plugins[0].controller.as_mut() {
        c.get_capacity = true;
    }
    env.write(move |ctx, l| super::super::register_node(ctx, "n1", &req, l))
        .await
        .unwrap();
    let d = env.read(|c| super::super::desired_state(c, "n1", 2)).await;
    let plugins: Vec<_> = d.capacity.iter().map(|q| q.plugin.as_str()).collect();
    assert_eq!(plugins, ["hp"]);
    assert!(
        !d.capacity[0].queries.is_empty(),
        "the plugin as a whole at least"
    );
    let d = env.read(|c| super::super::desired_state(c, "n2", 3)).await;
    assert!(
        d.capacity.is_empty(),
        "n2 hosts no controller: {:?}",
        d.capacity
    );

    // A host calls its own controller: one whose controller does not report GET_CAPACITY
    // is asked for none, whatever another host's says.
    let req = super::registration("n3", true, &[]);
    assert!(req.plugins[0].controller.is_some_and(|c| !c.get_capacity));
    env.write(move |ctx, l| super::super::register_node(ctx, "n3", &req, l))
        .await
        .unwrap();
    let d = env.read(|c| super::super::desired_state(c, "n3", 4)).await;
    assert!(
        d.capacity.is_empty(),
        "n3's controller does not report GET_CAPACITY: {:?}",
        d.capacity
    );
    let d = env.read(|c| super::super::desired_state(c, "n1", 5)).await;
    assert_eq!(d.capacity.len(), 1, "n1's does: {:?}", d.capacity);
}
