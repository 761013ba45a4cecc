//! "Did you mean": a volume, node or snapshot that is not registered gets the closest
//! registered name as its hint, the way cargo suggests a subcommand. (The server suggests
//! plugins and allocs itself: it has them at hand.)

use csivol_api::{Node, Snapshot, closest};

use crate::ctx::Ctx;
use crate::failure::{Exit, Failure, classify};

/// `err` with a "did you mean" hint when it is a volume, node or snapshot that was not
/// found and a registered name is close to it; otherwise `err` as it is.
pub async fn closest_name(ctx: &Ctx, err: anyhow::Error) -> anyhow::Error {
    let (exit, hint) = classify(&err);
    if exit != Exit::NotFound
        || hint
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean"))
    {
        return err;
    }
    let text = format!("{err:#}");
    let Some((kind, wanted)) = ["volume", "node", "snapshot"]
        .into_iter()
        .find_map(|kind| not_registered(&text, kind).map(|w| (kind, w)))
    else {
        return err;
    };
    // Only a suggestion: if the list cannot be had, the error stands as it is.
    let names: Vec<String> = match kind {
        "volume" => ctx
            .client
            .volumes(&[])
            .await
            .map(|vs| vs.into_iter().map(|v| v.name).collect()),
        "node" => ctx
            .client
            .get::<Vec<Node>>("/v1/nodes")
            .await
            .map(|ns| ns.into_iter().map(|n| n.name).collect()),
        _ => ctx
            .client
            .get::<Vec<Snapshot>>("/v1/snapshots")
            .await
            .map(|ss| ss.into_iter().map(|s| s.name).collect()),
    }
    .unwrap_or_default();
    let Some(best) = closest(&wanted, &names) else {
        return err;
    };
    let mut new_hint = format!("did you mean {kind} `{best}`?");
    if let Some(h) = hint {
        new_hint.push_str(&format!(" ({h})"));
    }
    Failure::new(exit, text).hint(new_hint).into()
}

/// The name in "KIND `name` is not registered", wherever it stands in the message (a
/// command's context comes first: "failed to claim volume `v` ...: volume `v` is not
/// registered"). Only an unknown volume or node gets a suggestion (an alloc missing from a
/// known volume does not).
fn not_registered(text: &str, kind: &str) -> Option<String> {
    let prefix = format!("{kind} `");
    let mut rest = text;
    while let Some(i) = rest.find(&prefix) {
        let after = &rest[i + prefix.len()..];
        let len = after.find('`')?;
        if after[len..].starts_with("` is not registered") {
            return Some(after[..len].to_owned());
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unknown_name_is_found_wherever_the_message_names_it() {
        assert_eq!(
            not_registered("failed: volume `v9` is not registered", "volume").as_deref(),
            Some("v9")
        );
        assert_eq!(
            not_registered(
                "failed to claim volume `demo-dat` for alloc `j` on node `node-1`: volume \
                 `demo-dat` is not registered",
                "volume"
            )
            .as_deref(),
            Some("demo-dat")
        );
        assert_eq!(
            not_registered(
                "failed to claim volume `v1` for alloc `j` on node `n3`: node `n3` is not registered",
                "volume"
            ),
            None
        );
        assert_eq!(
            not_registered("alloc `a1` holds no claim on volume `v1`", "volume"),
            None
        );
    }
}
