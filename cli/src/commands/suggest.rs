//! "Did you mean": a volume or node that is not registered gets the closest registered
//! name as its hint, the way cargo suggests a subcommand.

use csivol_api::Node;

use crate::ctx::Ctx;
use crate::failure::{Exit, Failure, classify};

/// `err` with a "did you mean" hint when it is a volume or node that was not found and a
/// registered name is close to it; otherwise `err` as it is.
pub async fn closest_name(ctx: &Ctx, err: anyhow::Error) -> anyhow::Error {
    let (exit, hint) = classify(&err);
    if exit != Exit::NotFound {
        return err;
    }
    let text = format!("{err:#}");
    let Some((kind, wanted)) = ["volume", "node"]
        .into_iter()
        .find_map(|kind| quoted_after(&text, &format!("{kind} `")).map(|w| (kind, w)))
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
        _ => ctx
            .client
            .get::<Vec<Node>>("/v1/nodes")
            .await
            .map(|ns| ns.into_iter().map(|n| n.name).collect()),
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

/// The name in "PREFIXname` is not registered": only an unknown volume or node gets a
/// suggestion (an alloc missing from a known volume does not).
fn quoted_after(text: &str, prefix: &str) -> Option<String> {
    let start = text.find(prefix)? + prefix.len();
    let len = text[start..].find('`')?;
    text[start + len..]
        .starts_with("` is not registered")
        .then(|| text[start..start + len].to_owned())
}

/// The name closest to `wanted`, if one is close enough to be what was meant: at most a
/// third of its characters (at least 2) edited away.
pub fn closest<'a>(wanted: &str, names: &'a [String]) -> Option<&'a str> {
    let limit = (wanted.chars().count() / 3).max(2);
    names
        .iter()
        .filter(|n| n.as_str() != wanted)
        .map(|n| (distance(wanted, n), n))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, n)| (*d, n.as_str()))
        .map(|(_, n)| n.as_str())
}

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_name_is_suggested_only_when_close() {
        let names: Vec<String> = ["demo-data", "demo-shared", "node-1", "node-2"]
            .map(String::from)
            .to_vec();
        for (wanted, best) in [
            ("demo-dat", Some("demo-data")),
            ("demo-shraed", Some("demo-shared")),
            ("node-3", Some("node-1")),
            ("nod1", Some("node-1")),
            ("zzz", None),
            ("completely-different", None),
        ] {
            assert_eq!(closest(wanted, &names), best, "{wanted}");
        }
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(
            quoted_after("failed: volume `v9` is not registered", "volume `").as_deref(),
            Some("v9")
        );
        assert_eq!(
            quoted_after("alloc `a1` holds no claim on volume `v1`", "volume `"),
            None
        );
    }
}
