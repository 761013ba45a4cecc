//! Names of volumes, nodes, allocs and plugins: one rule, and [`Name`], a string that
//! holds to it, checked when it is made or deserialised.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Names of volumes, nodes, allocs and plugins: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`, so a
/// name can safely become a path component and never reach a path it should not.
pub fn validate_name(kind: &str, name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let ok = match bytes.next() {
        Some(first) => {
            first.is_ascii_alphanumeric()
                && name.len() <= 128
                && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid {kind} name `{}`: use 1 to 128 letters, digits, `.`, `_` or `-`, starting with a letter or digit",
            name.escape_debug()
        ))
    }
}

/// The name in `names` closest to `wanted`, if one is close enough to be what was meant
/// ("did you mean"): at most a third of its characters (at least 2) edited away.
pub fn closest<'a>(wanted: &str, names: &'a [String]) -> Option<&'a str> {
    let limit = (wanted.chars().count() / 3).max(2);
    names
        .iter()
        .filter(|n| n.as_str() != wanted)
        .map(|n| (edit_distance(wanted, n), n))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, n)| (*d, n.as_str()))
        .map(|(_, n)| n.as_str())
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
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

/// What a [`Name`] names; its word in the error message of a name that breaks the rule.
pub trait NameKind {
    const KIND: &'static str;
}

/// The kinds of [`Name`]. Empty enums: they exist only as types.
pub mod kind {
    use super::NameKind;

    macro_rules! kinds {
        ($($ty:ident => $word:literal),* $(,)?) => {$(
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
            pub enum $ty {}

            impl NameKind for $ty {
                const KIND: &'static str = $word;
            }
        )*};
    }

    kinds! {
        Volume => "volume",
        Node => "node",
        Alloc => "alloc",
        Plugin => "plugin",
    }
}

/// A name that follows [`validate_name`]'s rule, so it is safe as a path component. Made
/// with [`Name::new`] or `parse`, or deserialised (a name that breaks the rule fails the
/// whole value, with the same message as `validate_name`); serialised as a plain string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name<K> {
    name: String,
    kind: PhantomData<K>,
}

pub type VolumeName = Name<kind::Volume>;
pub type NodeName = Name<kind::Node>;
pub type AllocName = Name<kind::Alloc>;
pub type PluginName = Name<kind::Plugin>;

impl<K: NameKind> Name<K> {
    pub fn new(name: impl Into<String>) -> Result<Self, String> {
        let name = name.into();
        validate_name(K::KIND, &name)?;
        Ok(Self {
            name,
            kind: PhantomData,
        })
    }
}

impl<K> Name<K> {
    pub fn as_str(&self) -> &str {
        &self.name
    }

    pub fn into_string(self) -> String {
        self.name
    }
}

impl<K> Deref for Name<K> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.name
    }
}

impl<K> AsRef<str> for Name<K> {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl<K> fmt::Display for Name<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl<K: NameKind> FromStr for Name<K> {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl<K> From<Name<K>> for String {
    fn from(name: Name<K>) -> Self {
        name.name
    }
}

impl<K> Serialize for Name<K> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

impl<'de, K: NameKind> Deserialize<'de> for Name<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "vol-1", "A.b_c-9", &"x".repeat(128)] {
            assert!(validate_name("volume", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../x",
            ".hidden",
            "-x",
            "a/b",
            "a b",
            &"x".repeat(129),
            "é",
        ] {
            let err = validate_name("volume", bad).unwrap_err();
            assert!(err.starts_with("invalid volume name"), "{err}");
        }
    }

    #[test]
    fn the_closest_name_is_suggested_only_when_close() {
        let names: Vec<String> = ["demo-data", "demo-shared", "node-1", "node-2", "hostpath"]
            .map(String::from)
            .to_vec();
        for (wanted, best) in [
            ("demo-dat", Some("demo-data")),
            ("demo-shraed", Some("demo-shared")),
            ("node-3", Some("node-1")),
            ("nod1", Some("node-1")),
            ("hostpth", Some("hostpath")),
            ("demo-data", None),
            ("zzz", None),
            ("completely-different", None),
        ] {
            assert_eq!(closest(wanted, &names), best, "{wanted}");
        }
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn typed_names_hold_to_the_rule_when_made_and_deserialised() {
        let v: VolumeName = "vol-1".parse().unwrap();
        assert_eq!(v.as_str(), "vol-1");
        assert_eq!(serde_json::to_string(&v).unwrap(), r#""vol-1""#);
        assert_eq!(serde_json::from_str::<VolumeName>(r#""vol-1""#).unwrap(), v);

        for bad in ["", "../x", "a/b", &"x".repeat(129)] {
            let want = validate_name("alloc", bad).unwrap_err();
            assert_eq!(AllocName::new(bad).unwrap_err(), want);
            let json = serde_json::to_string(bad).unwrap();
            let err = serde_json::from_str::<AllocName>(&json).unwrap_err();
            assert!(err.to_string().starts_with(&want), "{err}");
        }
        let err = serde_json::from_str::<NodeName>(r#""-x""#).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid node name `-x`"),
            "{err}"
        );
    }
}
