//! The delayed duplicate: a claim request whose cycle saw its claim acknowledged,
//! released and gone is sent again, as a network that delivers a request twice or a client
//! that retries far too late would: once exactly as every attempt of it went (its
//! `Idempotency-Key` and first send time), once without the key but with the send time (a
//! client that keeps no keys). Neither may bring the claim back: the server answers the
//! keyed one with its first answer without acting again, and refuses the other as sent
//! before its alloc's release. The duplicate is no new operation of the history (it is the
//! same request, whose effect the history already bounds before the release); a read of
//! the claim after it is, so a claim brought back leaves the history without an order.

use rand::Rng;
use rand::rngs::StdRng;

use super::faults::{Found, Load};
use super::load;
use crate::history::{Input, Output};
use csivol_client::once::Once;

/// Sends a released claim's request again, both ways in a random order, then reads the
/// claim. A duplicate the server accepted (a success that is not a replay of the first
/// answer: the claim made again, or found made by the other copy) is a violation in
/// itself.
pub async fn replay(load: &Load<'_>, rng: &mut StdRng, found: &mut Found) -> anyhow::Result<()> {
    let Some(sent) = load.ledger.pick_released(rng) else {
        found
            .notes
            .push("duplicate: no released claim yet".to_owned());
        return Ok(());
    };
    let keyed = sent.once.clone();
    let unkeyed = Once::unkeyed().sent_at(sent.once.sent_at_ms());
    let mut ways = [("with its key", keyed), ("without a key", unkeyed)];
    if rng.random_bool(0.5) {
        ways.swap(0, 1);
    }
    let claims = format!("/v1/volumes/{}/claims", sent.volume);
    for (how, once) in &ways {
        let r = match load.http.post_once(&claims, &sent.body, once).await {
            Ok(r) => r,
            Err(e) => {
                // Lost like any request may be; the read below still looks.
                found
                    .notes
                    .push(format!("duplicate {how}: no answer ({e:#})"));
                continue;
            }
        };
        let accepted = (200..300).contains(&r.status) && !r.replayed;
        found.notes.push(format!(
            "duplicate {how}: {}",
            match (r.status, r.replayed) {
                (_, true) => "answered its first answer".to_owned(),
                (s, false) => format!("HTTP {s}"),
            }
        ));
        if accepted {
            found.violations.push(format!(
                "a delayed duplicate of the claim of {} on {} ({how}, first sent at {} ms) was accepted after its release, not answered with its first answer: HTTP {}: {}",
                sent.alloc,
                sent.volume,
                sent.once.sent_at_ms(),
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
    }
    let path = format!("{claims}/{}", sent.alloc);
    let at = load.history.now();
    // A read that got no answer constrains nothing, and is left out.
    let seen = match load.http.get(&path).await {
        // A claim found on its node after a restore is no claim the duplicate made.
        Ok(r) if r.status == 200 && load::found_after_restore(load.http, &r).await => {
            return Ok(());
        }
        Ok(r) if r.status == 200 => Output::Present,
        Ok(r) if r.status == 404 => Output::Absent,
        _ => return Ok(()),
    };
    load.history
        .completed(&sent.volume, at, Input::Read(sent.alloc.clone()), seen);
    Ok(())
}
