//! Token names: `token create --name`, and the name as the actor in the event log.

use crate::support::Env;

#[tokio::test]
async fn a_named_token_acts_under_its_name() {
    let env = Env::start("token-names");
    let r = env
        .run(&["token", "create", "--role", "operator", "--name", "alice"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    snap!(r.stderr, @r"
    created operator token [TOKEN-ID] named alice; the secret below is shown only this once
    ");
    let alice = r.stdout.trim().to_owned();

    // What alice does is recorded as hers.
    let mut cmd = env.command(&["volume", "register", &env.file("v1.toml", "name = \"v1\"\nplugin = \"hp\"\nexternal_id = \"e1\"\naccess_mode = \"single-node-writer\"\nattachment = \"file-system\"\n")]);
    cmd.env("CSIVOL_TOKEN", &alice);
    let r = crate::support::run(cmd).await;
    assert_eq!(r.code, 0, "{r}");
    let r = env.run(&["events", "-o", "json"]).await;
    let events = r.json();
    let actors: Vec<(&str, &str)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(actors[1], ("volume-registered", "operator:alice"), "{r}");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .ends_with(" created, named alice"),
        "{r}"
    );

    // A name identifies one token; a name that looks like a token id is refused.
    snap!(env.run(&["token", "create", "--role", "reader", "--name", "alice"]).await, @r"
    exit: 4
    --- stdout
    --- stderr
    error: failed to create a reader token: a token named `alice` already exists
    hint: choose another name; each name identifies one token in the event log
    ");
    let r = env
        .run(&[
            "token",
            "create",
            "--role",
            "reader",
            "--name",
            "482effdfd2b8",
        ])
        .await;
    assert_eq!(r.code, 2, "{r}");
}
