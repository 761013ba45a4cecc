//! `csivol volume import nomad FILE`: Nomad's CSI volumes as csivol register specs, read
//! from `nomad volume status -json` (a list of volume stubs, Nomad's `CSIVolumeListStub`)
//! or `nomad volume status -json ID` (one volume, `CSIVolume`). Newer Nomad prints its
//! host volumes after the CSI list in the same output: every JSON value of the file is
//! read, and entries without an `ExternalID` (not CSI volumes) are skipped with a note.
//! A dry run by default: the specs are printed; `--out DIR` writes them as files and
//! `--apply` registers them.

use std::collections::BTreeMap;

use anyhow::Context;
use csivol_api::{AccessMode, Attachment, Topology, VolumeSpec, validate_name};
use csivol_client::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::args::{ImportArgs, ImportSource};
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};

/// The fields csivol takes of a Nomad CSI volume, stub or whole, as Nomad's API encodes
/// them (Go field names).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NomadVolume {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "ExternalID", default)]
    external_id: Option<String>,
    #[serde(rename = "PluginID", default)]
    plugin_id: String,
    #[serde(default)]
    access_mode: String,
    #[serde(default)]
    attachment_mode: String,
    #[serde(default)]
    topologies: Option<Vec<Option<NomadTopology>>>,
    /// Only a whole volume has these.
    #[serde(default)]
    requested_capabilities: Option<Vec<NomadCapability>>,
    #[serde(default)]
    mount_options: Option<NomadMountOptions>,
    #[serde(default)]
    context: Option<BTreeMap<String, String>>,
    #[serde(default)]
    parameters: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NomadTopology {
    #[serde(default)]
    segments: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NomadCapability {
    #[serde(default)]
    access_mode: String,
    #[serde(default)]
    attachment_mode: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NomadMountOptions {
    #[serde(rename = "FSType", default)]
    fs_type: String,
    #[serde(default)]
    mount_flags: Option<Vec<String>>,
}

/// A register spec file, as `volume register` reads it.
#[derive(Serialize)]
struct SpecFile<'a> {
    name: &'a str,
    #[serde(flatten)]
    spec: &'a VolumeSpec,
}

pub async fn run(ctx: &Ctx, args: ImportArgs) -> anyhow::Result<Exit> {
    let ImportSource::Nomad = args.from;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("failed to read {}", args.file.display()))?;
    let volumes = read(&text).map_err(|e| {
        Failure::usage(format!(
            "{} is not `nomad volume status -json` output: {e}",
            args.file.display()
        ))
        .hint("make it with: nomad volume status -type csi -json > FILE")
    })?;
    let mut specs = Vec::new();
    for v in volumes {
        match to_spec(&v, args.access_mode) {
            Ok(Some(s)) => specs.push((v.id.clone(), s)),
            Ok(None) => ctx.out.note(format!(
                "skipped {}: not a CSI volume (no ExternalID)",
                v.id
            )),
            Err(why) => ctx.out.note(format!("skipped {}: {why}", v.id)),
        }
    }
    for (name, spec) in &specs {
        let toml = toml::to_string(&SpecFile { name, spec })
            .with_context(|| format!("failed to write the spec of volume `{name}`"))?;
        if let Some(dir) = &args.out {
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, &toml)
                .with_context(|| format!("failed to write {}", path.display()))?;
            ctx.out.note(format!("wrote {}", path.display()));
        } else if !args.apply {
            ctx.out
                .line(format!("# csivol volume register {name}.toml\n{toml}"))?;
        }
        if args.apply {
            let a: Answer<csivol_api::Volume> = ctx
                .client
                .call(Method::PUT, &format!("/v1/volumes/{name}"), Some(spec))
                .await
                .with_context(|| format!("failed to register volume `{name}`"))?;
            ctx.out.note(if a.status == StatusCode::CREATED {
                format!("registered volume {name}")
            } else {
                format!("volume {name} is already registered with this spec; nothing changed")
            });
        }
    }
    if !args.apply {
        ctx.out.note(format!(
            "dry run: {} volume(s) would be registered; hint: run again with --apply",
            specs.len()
        ));
    }
    Ok(Exit::Ok)
}

/// Every volume in `text`: each JSON value is a list of volumes or one volume.
fn read(text: &str) -> Result<Vec<NomadVolume>, serde_json::Error> {
    let mut out = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>() {
        match value? {
            serde_json::Value::Array(items) => {
                for item in items {
                    out.push(serde_json::from_value(item)?);
                }
            }
            one => out.push(serde_json::from_value(one)?),
        }
    }
    Ok(out)
}

/// The register spec of a Nomad CSI volume; `None` for a volume that is not CSI.
fn to_spec(
    v: &NomadVolume,
    default_mode: Option<AccessMode>,
) -> Result<Option<VolumeSpec>, String> {
    let Some(external_id) = v.external_id.clone().filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    validate_name("volume", &v.id)?;
    // A volume's own mode, where Nomad recorded one; otherwise the first capability it was
    // registered with (newer Nomad keeps the mode per claim).
    let first = v.requested_capabilities.as_ref().and_then(|c| c.first());
    let access = Some(v.access_mode.as_str())
        .filter(|m| !m.is_empty())
        .or(first.map(|c| c.access_mode.as_str()))
        .filter(|m| !m.is_empty());
    let attach = Some(v.attachment_mode.as_str())
        .filter(|m| !m.is_empty())
        .or(first.map(|c| c.attachment_mode.as_str()))
        .unwrap_or("file-system");
    let access_mode: AccessMode = match (access, default_mode) {
        (Some(a), _) => a
            .parse()
            .map_err(|_| format!("access mode `{a}` is not one csivol knows"))?,
        (None, Some(m)) => m,
        (None, None) => {
            return Err("the output gives no access mode (Nomad records one only while the volume is claimed); hint: pass --access-mode".into());
        }
    };
    let attachment: Attachment =
        serde_json::from_value(serde_json::Value::String(attach.to_owned()))
            .map_err(|_| format!("attachment mode `{attach}` is not one csivol knows"))?;
    let (fs_type, mount_flags) = v
        .mount_options
        .as_ref()
        .map(|m| (m.fs_type.clone(), m.mount_flags.clone().unwrap_or_default()))
        .unwrap_or_default();
    let topology: Vec<Topology> = v
        .topologies
        .iter()
        .flatten()
        .flatten()
        .map(|t| t.segments.clone())
        .filter(|s| !s.is_empty())
        .collect();
    Ok(Some(VolumeSpec {
        plugin: v.plugin_id.clone(),
        external_id,
        access_mode,
        attachment,
        fs_type,
        mount_flags,
        context: v.context.clone().unwrap_or_default(),
        parameters: v.parameters.clone().unwrap_or_default(),
        // Nomad redacts secrets in its output: they are not carried over.
        secrets: BTreeMap::new(),
        topology,
        claim_mount_flags: Vec::new(),
        selinux_context: None,
        ownership: None,
        labels: Default::default(),
    }))
}
