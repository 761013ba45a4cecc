//! `csivol namespace quota`: bounds set, kept when others change, shown against what is
//! used, and a claim past one refused (exit 4) with what is used, the limit and who uses
//! most, then taken once a claim is released.

use crate::support::Env;

#[tokio::test]
async fn a_quota_bounds_a_namespaces_claims_and_shows_their_use() {
    let env = Env::start("quotas");
    let _n1 = env.node("n1", 0).await;
    env.run(&["namespace", "create", "team-a"]).await;
    let spec = env.file(
        "r.toml",
        "name = \"r\"\nplugin = \"hp\"\nexternal_id = \"ext-r\"\n\
         access_mode = \"multi-node-multi-writer\"\nattachment = \"file-system\"\n",
    );
    let r = env
        .run(&["-n", "team-a", "volume", "register", &spec])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(env.run(&["namespace", "quota", "team-a", "--claims", "1", "--capacity", "10Gi"]).await, @r#"
    exit: 0
    --- stdout
    namespace team-a
      volumes:    1
      claims:     0 of 1
      capacity:   0 B of 10 GiB
      snapshots:  0
      created:    [TIME]
    --- stderr
    set the quota of namespace team-a
    "#);
    // A bound not named keeps its value; `none` removes one.
    snap!(env.run(&["namespace", "quota", "team-a", "--volumes", "5", "--capacity", "none"]).await, @r#"
    exit: 0
    --- stdout
    namespace team-a
      volumes:    1 of 5
      claims:     0 of 1
      snapshots:  0
      created:    [TIME]
    --- stderr
    set the quota of namespace team-a
    "#);
    let r = env
        .run(&[
            "-n", "team-a", "claim", "r", "--node", "n1", "--alloc", "a1",
        ])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let r = env
        .run(&[
            "-n", "team-a", "claim", "r", "--node", "n1", "--alloc", "a2",
        ])
        .await;
    assert_eq!(r.code, 4, "{r}");
    for said in [
        "namespace `team-a` is at its quota of 1 claim(s): 1 used, and a claim of volume `r` \
         would make it 2; token `",
        "holds most (1)",
        "hint: free some first (release a claim, delete a volume), or raise the quota: \
         `csivol namespace quota team-a --claims N`",
    ] {
        assert!(r.stderr.contains(said), "`{said}` in {r}");
    }
    snap!(env.run(&["namespace", "show", "team-a", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "name": "team-a",
      "created_at": "[TIME]",
      "volumes": 1,
      "claims": 1,
      "snapshots": 0,
      "quota": {
        "volumes": 5,
        "claims": 1
      }
    }
    --- stderr
    "#);
    // A claim being released still counts until its node has taken it down.
    let r = env
        .run(&["-n", "team-a", "release", "r", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(env.run(&["namespace", "quota", "team-a", "--clear"]).await, @r#"
    exit: 0
    --- stdout
    namespace team-a
      volumes:    1
      claims:     1
      snapshots:  0
      created:    [TIME]
    --- stderr
    namespace team-a has no quota
    "#);
    snap!(env.run(&["namespace", "quota", "team-a", "--claims", "lots"]).await, @r#"
    exit: 2
    --- stdout
    --- stderr
    error: invalid value 'lots' for '--claims <N|none>': `lots` is not a count: give a whole number, or `none`

    For more information, try '--help'.
    "#);
}
