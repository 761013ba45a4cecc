//! Per-job volumes: a volume made for one job's claim (`run --fresh`, `claim --fresh`),
//! recorded with its claim in one transaction, created in the topology of the node it is
//! claimed on; a failed job may keep it for a while for inspection. Its deletion once
//! nothing holds it is `job_cleanup`'s, what a failed CreateVolume does to its claim the
//! Create kind's (`ops::kinds::create`).

use std::time::Duration;

use csivol_api::{
    self as api, ClaimDryRun, ClaimState, CreateVolumeSpec, FreeText, FreshClaimRequest,
    FreshSource, NodeStatus, TopologyRequest, validate_name,
};
use csivol_rules::kinds::EventKind;

use super::claims::Claimant;
use super::events::{event, show_segment};
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{JobVolumeRow, time};
use crate::store::{NewClaim, Snapshot, Txn};
use crate::watch::Key;

/// A per-job volume's csivol name: the job's name for it and 10 random hex digits, so
/// that no two jobs (a reused alloc, a CI matrix sharing one run id) ever share one. Cut
/// to stay within a volume name's length.
fn volume_name(name: &str) -> String {
    let hex = format!("{:010x}", rand::random::<u64>() & 0xff_ffff_ffff);
    let kept = &name[..name.len().min(128 - 1 - hex.len())];
    format!("{kept}-{hex}")
}

/// Refuses a source that is another job's per-job volume, or a snapshot cut from one: its
/// data is that job's alone (no other alloc may claim it, and none may copy it either).
fn refuse_other_jobs_data(
    conn: &(impl Snapshot + ?Sized),
    spec: &CreateVolumeSpec,
    alloc: &str,
) -> ApiResult<()> {
    let volume = match &spec.source {
        None => return Ok(()),
        Some(api::ContentSource::Volume(v)) => v.clone(),
        Some(api::ContentSource::Snapshot(s)) => match conn.snapshot(s)? {
            Some(snap) => snap.volume,
            None => return Ok(()),
        },
    };
    match conn.job_volume(&volume)? {
        Some(j) if j.alloc != alloc => Err(ApiError::forbidden(format!(
            "volume `{}` is another job's per-job volume: its data is that job's alone",
            api::split_key(&volume).1
        ))
        .with_hint("copy a volume or snapshot that is not made for one job")),
        _ => Ok(()),
    }
}

/// The volume spec a per-job volume is created with, from what the job named: a
/// snapshot's or a volume's own spec with it as the content source, or the job's spec.
/// What it names lives in the job's namespace, as the volume made for it will.
fn spec_of(
    conn: &(impl Snapshot + ?Sized),
    namespace: &str,
    source: &FreshSource,
) -> ApiResult<CreateVolumeSpec> {
    let (from, content) = match source {
        FreshSource::Spec(s) if !s.labels.is_empty() => {
            // A label could make the job's volume a pool's member, claimable by other jobs.
            return Err(ApiError::invalid(
                "a per-job volume's spec carries labels, which would put the job's own volume in a pool",
            )
            .with_hint("remove `labels` from the spec given to --fresh"));
        }
        FreshSource::Spec(s) => {
            let mut spec = (**s).clone();
            spec.source = match spec.source {
                Some(api::ContentSource::Snapshot(s)) => {
                    validate_name("snapshot", &s).map_err(ApiError::invalid)?;
                    Some(api::ContentSource::Snapshot(api::volume_key(namespace, &s)))
                }
                Some(api::ContentSource::Volume(v)) => {
                    validate_name("volume", &v).map_err(ApiError::invalid)?;
                    Some(api::ContentSource::Volume(api::volume_key(namespace, &v)))
                }
                None => None,
            };
            return Ok(spec);
        }
        FreshSource::Snapshot(s) => {
            validate_name("snapshot", s).map_err(ApiError::invalid)?;
            let s = &api::volume_key(namespace, s);
            let snap = conn.snapshot(s)?.ok_or_else(|| {
                ApiError::not_found(format!("snapshot `{s}` is not registered"))
                    .with_hint("`csivol snapshot list` lists the snapshots")
            })?;
            let Some(v) = conn.volume(&snap.volume)? else {
                return Err(ApiError::not_found(format!(
                    "volume `{}`, which snapshot `{s}` was cut from, is gone, so its spec is not \
                     known",
                    snap.volume
                ))
                .with_hint(format!(
                    "give a spec of its own: `--fresh NAME=spec:FILE` with `source = {{ snapshot \
                     = \"{}\" }}` in FILE",
                    api::split_key(s).1
                )));
            };
            (v, api::ContentSource::Snapshot(s.clone()))
        }
        FreshSource::Volume(name) => {
            validate_name("volume", name).map_err(ApiError::invalid)?;
            let name = &api::volume_key(namespace, name);
            let v = conn.require_volume(name)?;
            (v, api::ContentSource::Volume(name.clone()))
        }
    };
    let mounts = conn.volume_mounts(&from.name)?;
    Ok(CreateVolumeSpec {
        plugin: from.plugin,
        access_mode: from.access_mode,
        attachment: from.attachment,
        capacity_bytes: from.capacity_bytes.unwrap_or(0),
        fs_type: from.fs_type,
        mount_flags: from.mount_flags,
        parameters: from.parameters,
        secrets: from.secrets,
        topology_request: None,
        source: Some(content),
        // Changed later through ControllerModifyVolume only; a job's copy starts with the
        // plugin's defaults for them.
        mutable_parameters: Default::default(),
        claim_mount_flags: mounts.claim_mount_flags,
        selinux_context: mounts.selinux_context,
        ownership: mounts.ownership,
        // None of the source's labels: a job's copy of a pool's member is the job's alone
        // and must never join the pool.
        labels: Default::default(),
    })
}

/// Where the volume is to be made: in the node's own topology, as Kubernetes'
/// WaitForFirstConsumer binding makes a volume where its first pod runs. csi.proto,
/// TopologyRequirement `requisite`: "Specifies the list of topologies the provisioned
/// volume MUST be accessible from"; the node's segment is required and preferred. A node
/// whose plugin reports no topology asks for none. A spec that requires segments the node
/// is outside of is refused: the volume could never be claimed there.
fn placed_on_node(
    conn: &(impl Snapshot + ?Sized),
    spec: &mut CreateVolumeSpec,
    node: &str,
) -> ApiResult<()> {
    let n = conn.require_node(node)?;
    if n.status != NodeStatus::Ready {
        return Err(ApiError::blocked(format!(
            "node `{node}` is {}: no per-job volume is made for it",
            n.status
        ))
        .with_hint(format!("choose another node, or bring {node}'s agent back")));
    }
    if let Some(r) = csivol_rules::nodes::claim_refusal(node, n.eligibility) {
        return Err(ApiError::conflict(r.message).with_hint(r.hint));
    }
    let Some(p) = conn
        .node_plugin(node, &spec.plugin)?
        .filter(|p| p.node_service)
    else {
        return Err(ApiError::invalid(format!(
            "node `{node}` does not run plugin `{}`, which the per-job volume would be made with",
            spec.plugin
        ))
        .with_hint(format!(
            "`csivol plugin show {}` lists the nodes that run it",
            spec.plugin
        )));
    };
    let required = spec
        .topology_request
        .as_ref()
        .map(|r| r.required.clone())
        .unwrap_or_default();
    if !required.is_empty() && !csivol_rules::claims::reachable(&required, &p.topology) {
        let segments: Vec<_> = required.iter().map(show_segment).collect();
        return Err(ApiError::topology(format!(
            "node `{node}` ({}) is outside the spec's required topology {}",
            show_segment(&p.topology),
            segments.join(" or ")
        ))
        .with_hint("claim it on a node in that topology, or leave `topology_request` out"));
    }
    spec.topology_request = (!p.topology.is_empty()).then(|| TopologyRequest {
        required: vec![p.topology.clone()],
        preferred: vec![p.topology.clone()],
    });
    Ok(())
}

/// What a controller host of the plugin says it can do, checked before anything is made:
/// spec.md, CreateVolume: "A Controller Plugin MUST implement this RPC call if it has
/// `CREATE_DELETE_VOLUME` controller capability", so a plugin that does not report it is
/// never asked. The content source's own capability (CREATE_DELETE_SNAPSHOT, CLONE_VOLUME)
/// is checked where the source is resolved (`snapshots::content_source`).
fn plugin_creates(conn: &(impl Snapshot + ?Sized), plugin: &str) -> ApiResult<()> {
    let known = conn.plugin_ids()?;
    if !known.contains(&plugin.to_owned()) {
        return Err(super::volumes::unknown_plugin(plugin, &known));
    }
    match conn.controller_capabilities(plugin)? {
        Some(c) if c.create_delete_volume => Ok(()),
        Some(_) => Err(ApiError::invalid(format!(
            "plugin `{plugin}` cannot create volumes: its controller does not report \
             CREATE_DELETE_VOLUME"
        ))
        .with_hint(format!(
            "`csivol plugin show {plugin}` shows what its controller reports; claim a volume \
             of it by name instead"
        ))),
        None => Err(ApiError::conflict(format!(
            "no agent hosts the controller of plugin `{plugin}`, so nothing can create a \
             per-job volume of it"
        ))
        .with_hint(format!(
            "start an agent with `--controller {plugin}=ENDPOINT`"
        ))),
    }
}

/// What the plugin's GetCapacity answers say of a per-job volume's spec, placed in its
/// node's topology, named by the job's short name: refused when a fresh answer says it
/// cannot fit there, as `volume create` is. The samples are the server's memory, not the
/// state (`crate::capacity`), so the caller holding them judges. GetCapacity is advisory
/// (`csivol_rules::capacity`): without a fresh answer the creation goes to the plugin,
/// whose CreateVolume has the last word.
pub type Fit<'a> = &'a dyn Fn(&str, CreateVolumeSpec) -> ApiResult<CreateVolumeSpec>;

/// The checks of a per-job claim that read the request alone.
fn check_request(req: &FreshClaimRequest) -> ApiResult<()> {
    validate_name("name", &req.name).map_err(ApiError::invalid)?;
    validate_name("alloc", &req.claim.alloc).map_err(ApiError::invalid)?;
    validate_name("node", &req.claim.node).map_err(ApiError::invalid)?;
    req.claim.check_text().map_err(ApiError::text)?;
    match req.claim.ttl_ms {
        None => Err(ApiError::invalid(format!(
            "a per-job volume needs a lease: without one, a job killed before its release \
             would leave volume `{}` behind for good",
            req.name
        ))
        .with_hint("give the claim a lease with --ttl (e.g. --ttl 10m); `csivol run` renews it")),
        Some(0) => Err(ApiError::invalid("`ttl_ms` must be longer than zero")),
        Some(t) => api::limits::duration_ms("ttl_ms", t)
            .map(|_| ())
            .map_err(ApiError::out_of_range),
    }
}

/// Refuses a request for an alloc and name whose per-job volume in the namespace is still
/// held. Two jobs that share an alloc (a CI matrix whose legs share one run id) must never
/// share a volume made for one job, and a request sent again after its answer was lost is
/// answered by its `Idempotency-Key`, before this is reached. Another namespace's volume
/// of the same alloc and name is not this job's, and is not named to it.
fn refuse_if_held(
    conn: &(impl Snapshot + ?Sized),
    namespace: &str,
    req: &FreshClaimRequest,
) -> ApiResult<()> {
    let held = conn.job_volumes_of(&req.claim.alloc, &req.name)?;
    for j in held
        .into_iter()
        .filter(|j| api::namespace_of(&j.volume) == namespace)
    {
        if let Some(c) = conn.claim(&j.volume, &req.claim.alloc)?
            && !matches!(c.state, ClaimState::Releasing | ClaimState::Failed)
        {
            return Err(ApiError::conflict(format!(
                "alloc `{}` already holds per-job volume `{}` (volume `{}`): a volume made for one \
                 job is never shared with another job of the same alloc",
                req.claim.alloc,
                req.name,
                api::split_key(&j.volume).1
            ))
            .with_hint(
                "give each job its own --alloc (e.g. the matrix leg in it); a request sent again \
                 with its Idempotency-Key is answered its first answer",
            ));
        }
    }
    Ok(())
}

/// Refuses a late copy: a request sent before a restore the server found, or before the
/// alloc released a per-job volume of this name (its tombstone; the volume itself may be
/// deleted by then). Without this, a copy arriving after the job ended would make a volume
/// and a claim for a job that is gone.
fn refuse_if_late(
    conn: &(impl Snapshot + ?Sized),
    namespace: &str,
    req: &FreshClaimRequest,
    sent_at: Option<i64>,
) -> ApiResult<()> {
    let Some(sent_at) = sent_at else {
        return Ok(());
    };
    let key = api::volume_key(namespace, &req.name);
    for volume in conn.tombstoned_under(&format!("{key}-"), &req.claim.alloc)? {
        super::retries::refuse_if_released(conn, &volume, &req.claim.alloc, Some(sent_at))?;
    }
    // The restore's rule, which names no volume of its own here.
    super::retries::refuse_if_released(conn, &key, &req.claim.alloc, Some(sent_at))
}

/// `POST /v1/fresh-claims`: records a new volume in `namespace` (`creating`, its
/// CreateVolume queued with a CSI name of its own) and the job's claim on it, `queued`
/// until the volume is created, in one transaction. Returns the claim and whether it is
/// new; a request for an alloc and name whose claim is still held is refused, and so is a
/// late copy.
pub fn create_fresh_claim(
    ctx: &mut impl Txn,
    namespace: &str,
    req: &FreshClaimRequest,
    who: &Claimant<'_>,
    limits: &Limits,
    sent_at: Option<i64>,
    fit: Fit<'_>,
) -> ApiResult<(api::Claim, bool)> {
    check_request(req)?;
    super::namespaces::require_namespace(&*ctx, namespace)?;
    refuse_if_held(&*ctx, namespace, req)?;
    refuse_if_late(&*ctx, namespace, req, sent_at)?;
    let mut spec = spec_of(&*ctx, namespace, &req.source)?;
    refuse_other_jobs_data(&*ctx, &spec, &req.claim.alloc)?;
    plugin_creates(&*ctx, &spec.plugin)?;
    placed_on_node(&*ctx, &mut spec, &req.claim.node)?;
    let spec = fit(&req.name, spec)?;
    super::claims::refuse_past_claims_limit(&*ctx, who, limits)?;
    let key = |name: &str| api::volume_key(namespace, &volume_name(name));
    let mut volume = key(&req.name);
    {
        use crate::store::namespaces::Bound;
        let what = format!("a per-job volume for alloc `{}`", req.claim.alloc);
        super::quotas::refuse_past(&*ctx, namespace, Bound::FreshVolumes, 1, &what)?;
        super::quotas::refuse_past(&*ctx, namespace, Bound::Claims, 1, &what)?;
    }
    while ctx.volume(&volume)?.is_some() {
        volume = key(&req.name);
    }
    let (_, _) = super::volumes::create_volume(ctx, &volume, spec, who.actor, limits)?;
    ctx.put_job_volume(&JobVolumeRow {
        volume: volume.clone(),
        alloc: req.claim.alloc.clone(),
        name: req.name.clone(),
        node: req.claim.node.clone(),
        created_at: ctx.now(),
        kept_until: None,
    })?;
    let row = ctx.require_volume(&volume)?;
    let mount = super::mounts::claim_mount(&*ctx, &row, &req.claim, &limits.mounts)?;
    let ttl = req.claim.ttl_ms.expect("checked: a lease is required");
    let expires_at = super::changes::time_after(ctx.now(), "ttl_ms", ttl)?;
    ctx.insert_claim(NewClaim {
        volume: &volume,
        request: &req.claim,
        state: ClaimState::Queued,
        expires_at: Some(expires_at),
        claimer: Some(who.token),
        mount: &mount,
    })?;
    event(
        ctx,
        EventKind::ClaimQueued,
        Some(&volume),
        Some(&req.claim.node),
        Some(&req.claim.alloc),
        who.actor,
        format!(
            "{} claim recorded with a lease of {} on per-job volume `{}` ({}); queued: waits \
             for CreateVolume",
            req.claim.mode.as_str(),
            humantime::format_duration(Duration::from_millis(ttl)),
            req.name,
            req.source.describe()
        ),
    )?;
    let c = ctx
        .claim(&volume, &req.claim.alloc)?
        .expect("just inserted");
    let mut answer = ctx.claim_to_api(&c)?;
    answer.mount.not_applied = mount.not_applied;
    Ok((answer, true))
}

/// `POST /v1/fresh-claims` with `dry_run`: whether the plugin can make the volume where
/// the job runs (CREATE_DELETE_VOLUME, the source's capability, the node and its
/// topology, and its capacity there where the server holds a fresh GetCapacity answer),
/// making nothing. A refusal is the answer, not an error.
pub fn fresh_dry_run(
    conn: &(impl Snapshot + ?Sized),
    namespace: &str,
    req: &FreshClaimRequest,
    fit: Fit<'_>,
) -> ApiResult<ClaimDryRun> {
    let checked = check_request(req).and_then(|()| {
        super::namespaces::require_namespace(conn, namespace)?;
        refuse_if_held(conn, namespace, req)?;
        let mut spec = spec_of(conn, namespace, &req.source)?;
        refuse_other_jobs_data(conn, &spec, &req.claim.alloc)?;
        plugin_creates(conn, &spec.plugin)?;
        if let Some(source) = &spec.source {
            super::snapshots::content_source(conn, &spec.plugin, source)?;
        }
        placed_on_node(conn, &mut spec, &req.claim.node)?;
        fit(&req.name, spec).map(drop)
    });
    match checked {
        Ok(()) => Ok(ClaimDryRun {
            accepted: true,
            existing: false,
            state: Some(ClaimState::Queued),
            error: None,
        }),
        Err(e)
            if matches!(
                e.code(),
                api::ErrorCode::Internal | api::ErrorCode::Unavailable
            ) =>
        {
            Err(e)
        }
        Err(e) => Ok(ClaimDryRun {
            accepted: false,
            existing: false,
            state: None,
            error: Some(e.body()),
        }),
    }
}

/// `DELETE /v1/volumes/{name}/claims/{alloc}?keep_ms=`: the job failed and asks that its
/// per-job volume be kept that long after the release, for inspection. Refused for a
/// volume that is not this alloc's per-job volume.
pub fn keep_after_release(
    ctx: &mut impl Txn,
    volume: &str,
    alloc: &str,
    keep_ms: u64,
) -> ApiResult<()> {
    api::limits::duration_ms("keep_ms", keep_ms).map_err(ApiError::out_of_range)?;
    let Some(mut j) = ctx.job_volume(volume)?.filter(|j| j.alloc == alloc) else {
        return Err(ApiError::invalid(format!(
            "volume `{volume}` is not a per-job volume of alloc `{alloc}`: only those are kept \
             after a failed job"
        ))
        .with_hint("release it without `keep_ms`"));
    };
    let until = super::changes::time_after(ctx.now(), "keep_ms", keep_ms)?;
    j.kept_until = Some(until);
    ctx.put_job_volume(&j)?;
    ctx.touch(Key::Volume(volume.to_owned()));
    event(
        ctx,
        EventKind::VolumeKept,
        Some(volume),
        Some(&j.node),
        Some(alloc),
        "server",
        format!(
            "the job of per-job volume `{}` failed: kept for inspection until {}, then deleted",
            j.name,
            time(until)
        ),
    )
}
