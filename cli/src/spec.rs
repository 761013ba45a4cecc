//! Volume spec files for `volume register` and `volume create`: TOML or JSON, a `name` plus
//! the API's spec fields. Errors name the file, the position and the field, and never echo
//! a secret's value.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

use csivol_api::domain::AccessMode;
use csivol_api::{
    Attachment, CreateVolumeSpec, Topology, TopologyRequest, VolumeSpec, validate_name,
};
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};

use crate::failure::Failure;

/// `volume register` files. Every field maps onto [`VolumeSpec`]; the conversion below is
/// a struct literal, so a new required API field breaks the build here instead of being
/// silently missing from files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterFile {
    name: String,
    plugin: String,
    external_id: String,
    access_mode: AccessMode,
    attachment: Attachment,
    #[serde(default)]
    fs_type: String,
    #[serde(default)]
    mount_flags: Vec<String>,
    #[serde(default)]
    context: BTreeMap<String, String>,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
    #[serde(default)]
    secrets: Secrets,
    #[serde(default)]
    topology: Vec<Topology>,
    #[serde(default)]
    claim_mount_flags: Vec<String>,
    #[serde(default)]
    selinux_context: Option<String>,
    #[serde(default)]
    ownership: Option<csivol_api::Ownership>,
    /// An operator's labels on the volume (`labels = { pool = "build-cache" }`).
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// `volume create` files, likewise for [`CreateVolumeSpec`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateFile {
    name: String,
    plugin: String,
    access_mode: AccessMode,
    attachment: Attachment,
    /// A size with its unit (`"10GiB"`), or bytes; `capacity_bytes` takes either too.
    #[serde(default)]
    capacity: Option<Size>,
    #[serde(default)]
    capacity_bytes: Option<Size>,
    #[serde(default)]
    fs_type: String,
    #[serde(default)]
    mount_flags: Vec<String>,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
    #[serde(default)]
    secrets: Secrets,
    #[serde(default)]
    topology_request: Option<TopologyRequest>,
    #[serde(default)]
    mutable_parameters: BTreeMap<String, String>,
    #[serde(default)]
    claim_mount_flags: Vec<String>,
    #[serde(default)]
    selinux_context: Option<String>,
    #[serde(default)]
    ownership: Option<csivol_api::Ownership>,
    /// An operator's labels on the volume (`labels = { pool = "build-cache" }`).
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// A capacity: a number of bytes, or a string with a unit as `volume expand` takes it
/// (`"100M"`, `"1.5GiB"`).
#[derive(Debug)]
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: bytes, or a string with a unit such as \"10GiB\" or \"500M\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                csivol_api::limits::size_bytes("capacity_bytes", v)
                    .map(|_| Size(v))
                    .map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                csivol_api::parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A secret value. Its deserialiser refuses anything but a string without quoting the
/// value, which serde's own "invalid type: integer `1234`" message would do.
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        fn refuse<E: de::Error>() -> E {
            E::custom("a secret's value must be a string (the value is not shown)")
        }
        impl<'de> Visitor<'de> for V {
            type Value = Secret;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Secret, E> {
                Ok(Secret(v))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Secret, E> {
                Err(refuse())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secret, E> {
                Err(refuse())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secret, E> {
                Err(refuse())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secret, E> {
                Err(refuse())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Secret, E> {
                Err(refuse())
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
                Err(refuse())
            }
            fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
                Err(refuse())
            }
        }
        d.deserialize_any(V)
    }
}

/// A spec's `secrets`: a map of names to [`Secret`]s. Its deserialiser refuses anything
/// but a map without quoting it: serde's own "invalid type: string \"...\", expected a
/// map" would print a secret written in the wrong place.
#[derive(Debug, Default)]
struct Secrets(BTreeMap<String, Secret>);

impl<'de> Deserialize<'de> for Secrets {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        fn refuse<E: de::Error>() -> E {
            E::custom(
                "`secrets` must be a table of names and string values, e.g. `[secrets]` then \
                 `password = \"...\"` (the value given is not shown)",
            )
        }
        impl<'de> Visitor<'de> for V {
            type Value = Secrets;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of secret names to strings")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Secrets, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = m.next_entry::<String, Secret>()? {
                    out.insert(k, v);
                }
                Ok(Secrets(out))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Secrets, E> {
                Err(refuse())
            }
            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Secrets, E> {
                Err(refuse())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Secrets, E> {
                Err(refuse())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secrets, E> {
                Err(refuse())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secrets, E> {
                Err(refuse())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secrets, E> {
                Err(refuse())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Secrets, E> {
                Err(refuse())
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Secrets, A::Error> {
                Err(refuse())
            }
        }
        // `any`, not `map`: serde_json answers a `map` asked of a string with the string
        // quoted in its error, without asking the visitor.
        d.deserialize_any(V)
    }
}

fn secrets(s: Secrets) -> BTreeMap<String, String> {
    s.0.into_iter().map(|(k, Secret(v))| (k, v)).collect()
}

/// Reads a `volume register` spec: the volume's name and its spec.
pub fn read_register(path: &Path) -> anyhow::Result<(String, VolumeSpec)> {
    let (origin, f): (_, RegisterFile) = read(path, "register")?;
    check_name(&origin, &f.name)?;
    let spec = VolumeSpec {
        plugin: f.plugin,
        external_id: f.external_id,
        access_mode: f.access_mode,
        attachment: f.attachment,
        fs_type: f.fs_type,
        mount_flags: f.mount_flags,
        context: f.context,
        parameters: f.parameters,
        secrets: secrets(f.secrets),
        topology: f.topology,
        claim_mount_flags: f.claim_mount_flags,
        selinux_context: f.selinux_context,
        ownership: f.ownership,
        labels: f.labels,
    };
    Ok((f.name, spec))
}

/// Reads a `volume create` spec: the volume's name and its spec.
pub fn read_create(path: &Path) -> anyhow::Result<(String, CreateVolumeSpec)> {
    let (origin, f): (_, CreateFile) = read(path, "create")?;
    check_name(&origin, &f.name)?;
    let capacity_bytes = match (f.capacity, f.capacity_bytes) {
        (Some(_), Some(_)) => {
            return Err(Failure::usage(format!(
                "invalid volume spec {origin}: both `capacity` and `capacity_bytes` are given"
            ))
            .hint("keep one: `capacity = \"10GiB\"` (a unit, or bytes) or `capacity_bytes`")
            .into());
        }
        (Some(Size(b)), None) | (None, Some(Size(b))) => b,
        (None, None) => 0,
    };
    let spec = CreateVolumeSpec {
        plugin: f.plugin,
        access_mode: f.access_mode,
        attachment: f.attachment,
        capacity_bytes,
        fs_type: f.fs_type,
        mount_flags: f.mount_flags,
        parameters: f.parameters,
        secrets: secrets(f.secrets),
        topology_request: f.topology_request,
        source: None,
        mutable_parameters: f.mutable_parameters,
        claim_mount_flags: f.claim_mount_flags,
        selinux_context: f.selinux_context,
        ownership: f.ownership,
        labels: f.labels,
    };
    Ok((f.name, spec))
}

fn check_name(origin: &str, name: &str) -> anyhow::Result<()> {
    validate_name("volume", name)
        .map_err(|e| Failure::usage(format!("invalid volume spec {origin}: field `name`: {e}")))?;
    Ok(())
}

/// The largest spec file read: the server takes no larger request, and a spec within the
/// CSI spec's size limits is a few kilobytes.
const MAX_SPEC_BYTES: u64 = 1 << 20;

/// The text of a spec: a regular file (not a device, a pipe or a directory) of at most
/// [`MAX_SPEC_BYTES`], or stdin (`-`) read up to that.
fn read_text(path: &Path) -> anyhow::Result<(String, String)> {
    let (origin, reader): (String, Box<dyn Read>) = if path == Path::new("-") {
        ("<stdin>".to_owned(), Box::new(std::io::stdin()))
    } else {
        let origin = path.display().to_string();
        let cannot =
            |e: std::io::Error| Failure::usage(format!("cannot read volume spec {origin}: {e}"));
        // Looked at before it is opened: opening a pipe would wait for a writer.
        let meta = std::fs::metadata(path).map_err(cannot)?;
        if !meta.is_file() {
            return Err(
                Failure::usage(format!("volume spec {origin} is not a regular file"))
                    .hint("write the spec to a file, or pass it on stdin with `-`")
                    .into(),
            );
        }
        (
            origin.clone(),
            Box::new(std::fs::File::open(path).map_err(cannot)?),
        )
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_SPEC_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::usage(format!("cannot read volume spec {origin}: {e}")))?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(Failure::usage(format!(
            "volume spec {origin} is larger than {} KiB, more than any spec needs",
            MAX_SPEC_BYTES >> 10
        ))
        .hint("a spec's maps hold at most 4 KiB each (the CSI spec's size limits): is this the right file?")
        .into());
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::usage(format!("volume spec {origin} is not UTF-8 text")))?;
    Ok((origin, text))
}

/// Reads and parses a spec file for `volume VERB`.
fn read<T: DeserializeOwned>(path: &Path, verb: &str) -> anyhow::Result<(String, T)> {
    let (origin, text) = read_text(path)?;
    let json = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => true,
        Some("toml") => false,
        _ => text.trim_start().starts_with('{'),
    };
    let parsed = if json {
        serde_json::from_str(&text).map_err(|e| {
            let full = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let msg = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
            located(&origin, &text, (e.line(), e.column()), &msg, ':', verb)
        })
    } else {
        toml::from_str(&text).map_err(|e| {
            let (line, col) = e.span().map_or((0, 0), |s| line_col(&text, s.start));
            located(&origin, &text, (line, col), e.message().trim(), '=', verb)
        })
    };
    Ok((origin, parsed?))
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

/// An error at a position; names the key written on that line when the message does not
/// already name a field. Only the key is shown, never the line, which may hold a secret.
fn located(
    origin: &str,
    text: &str,
    (line, col): (usize, usize),
    msg: &str,
    sep: char,
    verb: &str,
) -> Failure {
    let mut out = format!("invalid volume spec {origin}");
    if line > 0 {
        out.push_str(&format!(": line {line}, column {col}"));
    }
    out.push_str(": ");
    out.push_str(msg);
    if !msg.contains("field `") {
        let key = text
            .lines()
            .nth(line.saturating_sub(1))
            .and_then(|l| l.split_once(sep))
            .map(|(k, _)| k.trim().trim_matches('"').trim())
            .filter(|k| !k.is_empty() && !k.contains(['{', '}', '[', ']', ',']));
        if let Some(k) = key {
            out.push_str(&format!(" (field `{k}`)"));
        }
    }
    let needs = if verb == "register" {
        "`name`, `plugin`, `external_id`, `access_mode`, `attachment`"
    } else {
        "`name`, `plugin`, `access_mode`, `attachment`"
    };
    Failure::usage(out).hint(format!(
        "a spec needs {needs}; `csivol volume {verb} --help` lists every field and its values"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, text: &str) -> Result<(String, VolumeSpec), String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        read_register(&path).map_err(|e| {
            let f = e.downcast_ref::<Failure>().unwrap();
            f.message.replace(&dir.path().display().to_string(), "DIR")
        })
    }

    const TOML: &str = r#"name = "v1"
plugin = "hp"
external_id = "ext-1"
access_mode = "single-node-writer"
attachment = "file-system"
[secrets]
key = "s3cret"
"#;

    #[test]
    fn toml_and_json_give_the_same_spec() {
        let (name, t) = parse("v.toml", TOML).unwrap();
        assert_eq!(name, "v1");
        assert_eq!(t.secrets["key"], "s3cret");
        let json = r#"{"name": "v1", "plugin": "hp", "external_id": "ext-1",
            "access_mode": "single-node-writer", "attachment": "file-system",
            "secrets": {"key": "s3cret"}}"#;
        assert_eq!(parse("v.json", json).unwrap().1, t);
        assert_eq!(parse("noext", json).unwrap().1, t, "sniffed as JSON");
        assert_eq!(parse("noext", TOML).unwrap().1, t, "sniffed as TOML");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let e = parse(
            "v.toml",
            &TOML.replace("single-node-writer", "single-writer"),
        )
        .unwrap_err();
        assert!(
            e.starts_with(
                "invalid volume spec DIR/v.toml: line 4, column 15: unknown variant `single-writer`"
            ),
            "{e}"
        );
        assert!(e.ends_with("(field `access_mode`)"), "{e}");
        let e = parse("v.toml", &TOML.replace("plugin", "plugn")).unwrap_err();
        assert!(e.contains("unknown field `plugn`"), "{e}");
        let e = parse("v.json", r#"{"name": "v1"}"#).unwrap_err();
        assert!(e.contains("missing field `plugin`"), "{e}");
        let e = parse("v.toml", &TOML.replace("\"v1\"", "\"a/b\"")).unwrap_err();
        assert!(e.contains("field `name`: invalid volume name `a/b`"), "{e}");
    }

    #[test]
    fn secret_values_are_never_echoed() {
        let e = parse("v.toml", &TOML.replace("\"s3cret\"", "987654321")).unwrap_err();
        assert!(!e.contains("987654321"), "{e}");
        assert!(e.contains("(field `key`)"), "{e}");
        let e = parse(
            "v.json",
            r#"{"name": "v1", "plugin": "hp", "external_id": "e", "access_mode": "single-node-writer",
                "attachment": "file-system", "secrets": {"key": 987654321}}"#,
        )
        .unwrap_err();
        assert!(!e.contains("987654321"), "{e}");
    }

    fn create(text: &str) -> Result<CreateVolumeSpec, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            format!(
                "name = \"c1\"\nplugin = \"hp\"\naccess_mode = \"single-node-writer\"\n\
                 attachment = \"file-system\"\n{text}"
            ),
        )
        .unwrap();
        read_create(&path)
            .map(|(_, spec)| spec)
            .map_err(|e| e.downcast_ref::<Failure>().unwrap().message.clone())
    }

    /// The example specs in `volume register --help` and `volume create --help` are read
    /// as they are shown.
    #[test]
    fn the_help_examples_parse() {
        let dir = tempfile::tempdir().unwrap();
        for (example, register) in [
            (crate::args::REGISTER_EXAMPLE, true),
            (crate::args::CREATE_EXAMPLE, false),
        ] {
            let body: Vec<&str> = example.lines().skip(1).map(str::trim).collect();
            let path = dir.path().join("example.toml");
            std::fs::write(&path, body.join("\n")).unwrap();
            if register {
                read_register(&path).unwrap();
            } else {
                assert_eq!(read_create(&path).unwrap().1.capacity_bytes, 1 << 30);
            }
        }
    }

    #[test]
    fn capacities_take_units_as_volume_expand_does() {
        for (line, bytes) in [
            ("", 0),
            ("capacity_bytes = 1048576", 1 << 20),
            ("capacity_bytes = \"100M\"", 100_000_000),
            ("capacity = \"1.5GiB\"", 3 << 29),
            ("capacity = \"64 MiB\"", 64 << 20),
            ("capacity = 4096", 4096),
        ] {
            assert_eq!(create(line).unwrap().capacity_bytes, bytes, "{line}");
        }
        let e = create("capacity = \"10 GB\"\ncapacity_bytes = 5").unwrap_err();
        assert!(
            e.ends_with("both `capacity` and `capacity_bytes` are given"),
            "{e}"
        );
        let e = create("capacity = \"10 gigs\"").unwrap_err();
        assert!(e.contains("unknown unit `gigs`"), "{e}");
        assert!(e.ends_with("(field `capacity`)"), "{e}");
        let e = create("capacity_bytes = -1").unwrap_err();
        assert!(e.contains("a size cannot be negative"), "{e}");
    }

    #[test]
    fn topology_in_register_and_create_files() {
        let (_, t) = parse(
            "v.toml",
            "name = \"v1\"\nplugin = \"hp\"\nexternal_id = \"e\"\n\
             access_mode = \"single-node-writer\"\nattachment = \"file-system\"\n\
             topology = [{ zone = \"a\", rack = \"1\" }, { zone = \"b\" }]\n",
        )
        .unwrap();
        let seg = |pairs: &[(&str, &str)]| -> Topology {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(
            t.topology,
            [seg(&[("zone", "a"), ("rack", "1")]), seg(&[("zone", "b")])]
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "name = \"c1\"\nplugin = \"hp\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\n[topology_request]\n\
             required = [{ zone = \"a\" }, { zone = \"b\" }]\npreferred = [{ zone = \"b\" }]\n",
        )
        .unwrap();
        let (_, c) = read_create(&path).unwrap();
        assert_eq!(
            c.topology_request,
            Some(TopologyRequest {
                required: vec![seg(&[("zone", "a")]), seg(&[("zone", "b")])],
                preferred: vec![seg(&[("zone", "b")])],
            })
        );
        // A misspelt key is named, not ignored.
        std::fs::write(
            &path,
            "name = \"c1\"\nplugin = \"hp\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\n[topology_request]\nrequisite = [{ zone = \"a\" }]\n",
        )
        .unwrap();
        let e = read_create(&path).unwrap_err();
        let f = e.downcast_ref::<Failure>().unwrap();
        assert!(
            f.message
                .contains("unknown field `requisite`, expected `required` or `preferred`"),
            "{}",
            f.message
        );
    }
}
