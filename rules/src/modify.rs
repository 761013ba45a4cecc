//! Pure: whether a volume's mutable parameters may be changed now (`csivol volume modify`),
//! and which keys ControllerModifyVolume is sent. Table-tested below.
//!
//! The spec (ControllerModifyVolume): "The CO SHOULD specify the intended values of all
//! mutable parameters it intends to modify. SPs MUST NOT modify volumes based on the
//! absence of keys". So csivol sends the keys whose value changes and nothing else: a key
//! not named keeps its value, and one that already has the value asked for is left out.

use std::collections::BTreeMap;

use csivol_api::{Modification, ModificationState};

/// What the rule reads.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    pub volume: &'a str,
    pub plugin: &'a str,
    /// The volume's lifecycle is `ready`.
    pub ready: bool,
    /// The mutable parameters the volume has.
    pub current: &'a BTreeMap<String, String>,
    pub requested: &'a BTreeMap<String, String>,
    /// A modification recorded: pending, or refused (infeasible, failed).
    pub under_way: Option<&'a Modification>,
    /// `None` when no agent hosts the plugin's controller; otherwise whether a controller
    /// host reports MODIFY_VOLUME.
    pub modify_volume: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Call ControllerModifyVolume with these keys (those that change).
    Start(BTreeMap<String, String>),
    /// The volume has these values, or is being given them: nothing to do.
    Nothing,
    /// The volume has these values, and a refused modification stands: it is dropped.
    Withdraw,
}

/// Why a modification is refused, and whether the request itself is wrong (`invalid`) or
/// something is in the way (`conflict`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub invalid: bool,
    pub message: String,
    pub hint: String,
}

fn refuse(invalid: bool, message: String, hint: String) -> Result<Decision, Refusal> {
    Err(Refusal {
        invalid,
        message,
        hint,
    })
}

/// The keys of `requested` whose value differs from `current`.
pub fn changes(
    current: &BTreeMap<String, String>,
    requested: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    requested
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The rule.
pub fn decide(f: &Facts<'_>) -> Result<Decision, Refusal> {
    let (v, p) = (f.volume, f.plugin);
    if f.requested.is_empty() {
        return refuse(
            true,
            "a modification names at least one mutable parameter".into(),
            format!("csivol volume modify {v} --param KEY=VALUE"),
        );
    }
    if let Some(k) = f.requested.keys().find(|k| k.trim().is_empty()) {
        return refuse(
            true,
            format!("mutable parameter key `{k}` is empty"),
            "write each as --param KEY=VALUE with a key".into(),
        );
    }
    if !f.ready {
        return refuse(
            false,
            format!("volume `{v}` is not ready; it cannot be modified now"),
            format!("wait for it to be created; `csivol volume show {v}` shows where it stands"),
        );
    }
    match f.modify_volume {
        None => {
            return refuse(
                false,
                format!(
                    "no agent hosts the controller of plugin `{p}`, so it cannot say whether it can modify volumes"
                ),
                format!("start an agent with `--controller {p}=ENDPOINT`, then try again"),
            );
        }
        Some(false) => {
            return refuse(
                true,
                format!(
                    "plugin `{p}` cannot modify volumes: its controller does not report MODIFY_VOLUME"
                ),
                format!(
                    "use a plugin whose ControllerGetCapabilities lists MODIFY_VOLUME; `csivol plugin show {p}` shows what its controller reports"
                ),
            );
        }
        Some(true) => {}
    }
    let changes = changes(f.current, f.requested);
    match f.under_way {
        Some(m) if m.state == ModificationState::Pending => {
            if changes == m.parameters {
                return Ok(Decision::Nothing);
            }
            refuse(
                false,
                format!(
                    "volume `{v}` is being modified to {}",
                    Modification::describe(&m.parameters)
                ),
                format!(
                    "wait for it (`csivol volume show {v}`), then ask again; one modification at a time"
                ),
            )
        }
        Some(_) if changes.is_empty() => Ok(Decision::Withdraw),
        _ if changes.is_empty() => Ok(Decision::Nothing),
        _ => Ok(Decision::Start(changes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn stood(state: ModificationState, pairs: &[(&str, &str)]) -> Modification {
        Modification {
            parameters: map(pairs),
            state,
            error: None,
            requested_at: String::new(),
            after_release: false,
        }
    }

    /// The base case: a ready volume with iops=100, tier=standard, asked for iops=3000.
    fn check(
        requested: &[(&str, &str)],
        under_way: Option<&Modification>,
        change: impl FnOnce(&mut Facts<'_>),
        want: Result<Decision, (bool, &str)>,
    ) {
        let current = map(&[("iops", "100"), ("tier", "standard")]);
        let requested = map(requested);
        let mut f = Facts {
            volume: "db",
            plugin: "hostpath",
            ready: true,
            current: &current,
            requested: &requested,
            under_way,
            modify_volume: Some(true),
        };
        change(&mut f);
        match (want, decide(&f)) {
            (Ok(w), Ok(g)) => assert_eq!(g, w, "{f:?}"),
            (Err((invalid, text)), Err(r)) => {
                assert_eq!(r.invalid, invalid, "{f:?}: {r:?}");
                assert!(r.message.contains(text), "{f:?}: {}", r.message);
                assert!(!r.hint.is_empty(), "a refusal says what to do");
            }
            (w, g) => panic!("{f:?}: want {w:?}, got {g:?}"),
        }
    }

    #[test]
    fn modification_rules() {
        use Decision::{Nothing, Start, Withdraw};
        use ModificationState::{Failed, Infeasible, Pending};
        // Only the keys that change are sent.
        check(
            &[("iops", "3000")],
            None,
            |_| {},
            Ok(Start(map(&[("iops", "3000")]))),
        );
        check(
            &[("iops", "3000"), ("tier", "standard")],
            None,
            |_| {},
            Ok(Start(map(&[("iops", "3000")]))),
        );
        check(
            &[("colour", "red")],
            None,
            |_| {},
            Ok(Start(map(&[("colour", "red")]))),
        );
        // Values the volume has: nothing to do.
        check(&[("iops", "100")], None, |_| {}, Ok(Nothing));
        // Bad requests.
        check(
            &[],
            None,
            |_| {},
            Err((true, "at least one mutable parameter")),
        );
        check(&[(" ", "1")], None, |_| {}, Err((true, "is empty")));
        // A plugin without the capability, or nobody to ask.
        check(
            &[("iops", "3000")],
            None,
            |f| f.modify_volume = Some(false),
            Err((true, "does not report MODIFY_VOLUME")),
        );
        check(
            &[("iops", "3000")],
            None,
            |f| f.modify_volume = None,
            Err((false, "no agent hosts the controller")),
        );
        check(
            &[("iops", "3000")],
            None,
            |f| f.ready = false,
            Err((false, "is not ready")),
        );
        // One at a time: the same again is a no-op, another waits.
        let pending = stood(Pending, &[("iops", "3000")]);
        check(&[("iops", "3000")], Some(&pending), |_| {}, Ok(Nothing));
        check(
            &[("iops", "5000")],
            Some(&pending),
            |_| {},
            Err((false, "is being modified to iops=3000")),
        );
        // A refused one is replaced by a new request, or withdrawn by asking for what the
        // volume has.
        for state in [Infeasible, Failed] {
            let refused = stood(state, &[("iops", "999999999")]);
            check(
                &[("iops", "3000")],
                Some(&refused),
                |_| {},
                Ok(Start(map(&[("iops", "3000")]))),
            );
            check(&[("iops", "100")], Some(&refused), |_| {}, Ok(Withdraw));
        }
    }
}
