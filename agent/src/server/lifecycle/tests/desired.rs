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
    assert_eq!(d.unstage[0].external_id, "ext-1");
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
    assert_eq!(e.code.as_str(), "not_found");
}
