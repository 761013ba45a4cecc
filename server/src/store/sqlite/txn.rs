//! The SQLite side of [`Txn`]: each row change of the state machine as the statement it
//! runs inside the request's savepoint on the writer thread.

use std::collections::BTreeMap;

use csivol_api::domain::PublishContext;
use csivol_api::{
    self as api, AttachmentState, ClaimState, NodeStatus, PluginRegistration, Topology,
};
use rusqlite::params;

use super::{
    access, claim_mounts, claimers, drift, exec, held, job_volumes, lingers, listings, nodes, ops,
    pools, retries, snapshots, volume_availability, volume_mounts,
};
use crate::error::{ApiError, ApiResult};
use crate::model::{Lifecycle, NewFence, TokenRow, VolumeRow, to_json};
use crate::store::sqlite::writer::WriteCtx;
use crate::store::{Event, NewClaim, Txn};
use crate::watch::Key;
use csivol_rules::kinds::OpKind;

impl Txn for WriteCtx<'_> {
    fn index(&self) -> u64 {
        self.index
    }

    fn now(&self) -> i64 {
        self.now
    }

    fn touch(&mut self, key: Key) {
        WriteCtx::touch(self, key);
    }

    fn after_commit(&mut self, f: Box<dyn FnOnce() + Send>) {
        WriteCtx::after_commit(self, f);
    }

    fn append_event(&mut self, e: Event<'_>) -> ApiResult<()> {
        exec(
            self.tx,
            "INSERT INTO events (at, kind, volume, node, alloc, actor, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                self.now,
                e.kind.as_str(),
                e.volume,
                e.node,
                e.alloc,
                e.actor,
                e.message
            ],
        )?;
        Ok(())
    }

    fn put_volume(&mut self, v: &VolumeRow) -> ApiResult<()> {
        self.memo.stamped.clear();
        let secrets = crate::secrets::seal(&v.name, &v.secrets).map_err(ApiError::internal)?;
        exec(
            self.tx,
            "INSERT INTO volumes (name, plugin, external_id, access_mode, attachment, fs_type, mount_flags, context, \
             parameters, secrets, capacity_bytes, lifecycle, error, created_at, updated_at, modify_index, \
             accessible_topology, topology_request, mutable_parameters) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15, ?16, ?17, ?18) \
             ON CONFLICT (name) DO UPDATE SET plugin = ?2, external_id = ?3, access_mode = ?4, attachment = ?5, \
             fs_type = ?6, mount_flags = ?7, context = ?8, parameters = ?9, secrets = ?10, capacity_bytes = ?11, \
             lifecycle = ?12, error = ?13, updated_at = ?14, modify_index = ?15, accessible_topology = ?16, \
             topology_request = ?17, mutable_parameters = ?18",
            params![
                v.name,
                v.plugin,
                v.external_id,
                v.access_mode.as_str(),
                v.attachment.as_str(),
                v.fs_type,
                to_json(&v.mount_flags),
                to_json(&v.context),
                to_json(&v.parameters),
                secrets,
                v.capacity_bytes.map(|c| c as i64),
                v.lifecycle.as_str(),
                v.error,
                self.now,
                self.index as i64,
                to_json(&v.accessible_topology),
                v.topology_request.as_ref().map(to_json),
                to_json(&v.mutable_parameters),
            ],
        )?;
        Ok(())
    }

    fn stamp_volume(&mut self, name: &str) -> ApiResult<()> {
        if self.memo.stamped.iter().any(|v| v == name) {
            return Ok(());
        }
        exec(
            self.tx,
            "UPDATE volumes SET modify_index = ?1, updated_at = ?2 WHERE name = ?3",
            params![self.index as i64, self.now, name],
        )?;
        self.memo.stamped.push(name.to_owned());
        Ok(())
    }

    fn set_volume_lifecycle(
        &mut self,
        name: &str,
        lifecycle: Lifecycle,
        error: Option<&str>,
    ) -> ApiResult<()> {
        self.memo.stamped.clear();
        exec(
            self.tx,
            "UPDATE volumes SET lifecycle = ?1, error = ?2, updated_at = ?3, modify_index = ?4 WHERE name = ?5",
            params![lifecycle.as_str(), error, self.now, self.index as i64, name],
        )?;
        Ok(())
    }

    fn set_volume_error(&mut self, name: &str, error: &str, changed: bool) -> ApiResult<()> {
        self.memo.stamped.clear();
        if changed {
            exec(
                self.tx,
                "UPDATE volumes SET error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![error, self.now, self.index as i64, name],
            )?;
        } else {
            exec(
                self.tx,
                "UPDATE volumes SET error = ?1, modify_index = ?2 WHERE name = ?3",
                params![error, self.index as i64, name],
            )?;
        }
        Ok(())
    }

    fn volume_created(
        &mut self,
        name: &str,
        external_id: &str,
        capacity_bytes: u64,
        context: &BTreeMap<String, String>,
        accessible_topology: &[Topology],
    ) -> ApiResult<()> {
        self.memo.stamped.clear();
        exec(
            self.tx,
            "UPDATE volumes SET external_id = ?1, capacity_bytes = ?2, context = ?3, lifecycle = 'ready', error = NULL, \
             updated_at = ?4, modify_index = ?5, accessible_topology = ?7 WHERE name = ?6 AND lifecycle = 'creating'",
            params![
                external_id,
                capacity_bytes as i64,
                to_json(context),
                self.now,
                self.index as i64,
                name,
                to_json(&accessible_topology),
            ],
        )?;
        Ok(())
    }

    fn set_volume_expansion(
        &mut self,
        name: &str,
        capacity_bytes: Option<u64>,
        expansion: Option<&api::Expansion>,
    ) -> ApiResult<()> {
        self.memo.stamped.clear();
        exec(
            self.tx,
            "UPDATE volumes SET capacity_bytes = COALESCE(?1, capacity_bytes), expansion = ?2, \
             updated_at = ?3, modify_index = ?4 WHERE name = ?5",
            params![
                capacity_bytes.map(|c| c as i64),
                expansion.map(to_json),
                self.now,
                self.index as i64,
                name
            ],
        )?;
        Ok(())
    }

    fn set_volume_modification(
        &mut self,
        name: &str,
        mutable_parameters: Option<&BTreeMap<String, String>>,
        modification: Option<&api::Modification>,
    ) -> ApiResult<()> {
        self.memo.stamped.clear();
        exec(
            self.tx,
            "UPDATE volumes SET mutable_parameters = COALESCE(?1, mutable_parameters), \
             modification = ?2, updated_at = ?3, modify_index = ?4 WHERE name = ?5",
            params![
                mutable_parameters.map(to_json),
                modification.map(to_json),
                self.now,
                self.index as i64,
                name
            ],
        )?;
        Ok(())
    }

    fn delete_volume(&mut self, name: &str) -> ApiResult<()> {
        self.memo.stamped.clear();
        exec(self.tx, "DELETE FROM volumes WHERE name = ?1", [name])?;
        exec(self.tx, "DELETE FROM ops WHERE volume = ?1", [name])?;
        volume_mounts::put(self, name, &Default::default())?;
        volume_availability::put(self, name, None)?;
        job_volumes::remove(self, name)?;
        pools::forget_volume(self, name)?;
        Ok(())
    }

    fn put_volume_mounts(&mut self, volume: &str, m: &csivol_api::VolumeMounts) -> ApiResult<()> {
        volume_mounts::put(self, volume, m)
    }

    fn set_volume_availability(
        &mut self,
        volume: &str,
        a: Option<&crate::model::VolumeAvailabilityRow>,
    ) -> ApiResult<()> {
        volume_availability::put(self, volume, a)
    }

    fn put_job_volume(&mut self, j: &crate::model::JobVolumeRow) -> ApiResult<()> {
        job_volumes::put(self, j)
    }

    fn put_volume_labels(
        &mut self,
        volume: &str,
        labels: &BTreeMap<String, String>,
    ) -> ApiResult<()> {
        pools::put_labels(self, volume, labels)
    }

    fn put_pool(&mut self, p: &crate::model::PoolRow) -> ApiResult<()> {
        pools::put_pool(self, p)
    }

    fn delete_pool(&mut self, name: &str) -> ApiResult<()> {
        pools::delete_pool(self, name)
    }

    fn set_cache_key(&mut self, volume: &str, key: &str) -> ApiResult<()> {
        let now = self.now();
        pools::set_cache_key(self, volume, Some(key), now)
    }

    fn insert_pool_claim(&mut self, c: &crate::model::PoolClaimRow) -> ApiResult<()> {
        pools::insert_claim(self, c)
    }

    fn put_linger(&mut self, l: &crate::model::LingerRow) -> ApiResult<()> {
        lingers::put(self, l)
    }

    fn delete_linger(&mut self, volume: &str, node: &str) -> ApiResult<()> {
        lingers::delete(self, volume, node)
    }

    fn close_pool_claims(&mut self, volume: &str, alloc: &str) -> ApiResult<()> {
        let now = self.now();
        pools::close_claims(self, volume, alloc, now)
    }

    fn put_pool_waiter(
        &mut self,
        pool: &str,
        alloc: &str,
        w: Option<&crate::model::PoolWaiterRow>,
    ) -> ApiResult<()> {
        super::pool_waiters::put(self, pool, alloc, w)
    }

    fn delete_deleting_volume(&mut self, name: &str) -> ApiResult<()> {
        self.memo.stamped.clear();
        let deleted = exec(
            self.tx,
            "DELETE FROM volumes WHERE name = ?1 AND lifecycle = 'deleting'",
            [name],
        )?;
        if deleted > 0 {
            volume_mounts::put(self, name, &Default::default())?;
            volume_availability::put(self, name, None)?;
            job_volumes::remove(self, name)?;
            pools::forget_volume(self, name)?;
        }
        Ok(())
    }

    fn insert_claim(&mut self, c: NewClaim<'_>) -> ApiResult<()> {
        let req = c.request;
        exec(
            self.tx,
            "INSERT INTO claims (volume, alloc, node, mode, state, created_at, updated_at, modify_index, \
             ttl_ms, expires_at, labels) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10)",
            params![
                c.volume,
                req.alloc,
                req.node,
                req.mode.as_str(),
                c.state.as_str(),
                self.now,
                self.index as i64,
                req.ttl_ms.map(|t| t as i64),
                c.expires_at,
                to_json(&req.labels)
            ],
        )?;
        claim_mounts::record(self, c.volume, &req.alloc, c.mount)?;
        match c.claimer {
            Some(token) => claimers::record(self, c.volume, &req.alloc, token),
            None => Ok(()),
        }
    }

    fn set_claim_state(&mut self, volume: &str, alloc: &str, state: ClaimState) -> ApiResult<()> {
        let sql = format!(
            "UPDATE claims SET state = ?1, updated_at = ?2, modify_index = ?3, \
             error = CASE WHEN ?1 IN ('ready', 'releasing') THEN NULL ELSE error END, \
             next_retry_at = CASE WHEN ?1 IN ('ready', 'releasing', 'failed', 'blocked') THEN NULL ELSE next_retry_at END, \
             waiting = CASE WHEN ?1 = 'publishing' THEN waiting END, \
             waiting_since = CASE WHEN ?1 = 'publishing' THEN waiting_since END, \
             waiting_timeout_ms = CASE WHEN ?1 = 'publishing' THEN waiting_timeout_ms END, \
             condition = CASE WHEN ?1 IN ('ready', 'publishing', 'blocked') THEN condition END{} \
             WHERE volume = ?4 AND alloc = ?5",
            drift::cleared_with_state(self.tx)?
        );
        exec(
            self.tx,
            &sql,
            params![state.as_str(), self.now, self.index as i64, volume, alloc],
        )?;
        Ok(())
    }

    fn set_claim_target(&mut self, volume: &str, alloc: &str, target_path: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET target_path = ?1, updated_at = ?2, modify_index = ?3 WHERE volume = ?4 AND alloc = ?5",
            params![target_path, self.now, self.index as i64, volume, alloc],
        )?;
        Ok(())
    }

    fn set_claim_waiting(
        &mut self,
        volume: &str,
        alloc: &str,
        reason: &str,
        since_ms: i64,
        timeout_ms: i64,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET waiting = ?1, waiting_since = ?2, waiting_timeout_ms = ?3, \
             updated_at = ?4, modify_index = ?5 WHERE volume = ?6 AND alloc = ?7",
            params![
                reason,
                since_ms,
                timeout_ms,
                self.now,
                self.index as i64,
                volume,
                alloc
            ],
        )?;
        Ok(())
    }

    fn set_claim_ownership_change(
        &mut self,
        volume: &str,
        alloc: &str,
        mount: &api::ClaimMount,
    ) -> ApiResult<()> {
        claim_mounts::record(self, volume, alloc, mount)
    }

    fn set_claim_condition(
        &mut self,
        volume: &str,
        alloc: &str,
        condition: Option<&str>,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET condition = ?1, updated_at = ?2, modify_index = ?3 \
             WHERE volume = ?4 AND alloc = ?5",
            params![condition, self.now, self.index as i64, volume, alloc],
        )?;
        Ok(())
    }

    fn set_claim_error(
        &mut self,
        volume: &str,
        alloc: &str,
        error: &str,
        next_retry_at: Option<i64>,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 WHERE volume = ?5 AND alloc = ?6",
            params![
                error,
                next_retry_at,
                self.now,
                self.index as i64,
                volume,
                alloc
            ],
        )?;
        Ok(())
    }

    fn set_claim_drift(
        &mut self,
        volume: &str,
        alloc: &str,
        drift: &crate::model::Drift,
    ) -> ApiResult<()> {
        drift::set(self, volume, alloc, drift)
    }

    fn set_claim_release_pending(&mut self, volume: &str, alloc: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET release_pending = 1 WHERE volume = ?1 AND alloc = ?2",
            params![volume, alloc],
        )?;
        Ok(())
    }

    fn delete_claim(&mut self, volume: &str, alloc: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM claims WHERE volume = ?1 AND alloc = ?2",
            params![volume, alloc],
        )?;
        Ok(())
    }

    fn insert_attachment(
        &mut self,
        volume: &str,
        node: &str,
        state: AttachmentState,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "INSERT INTO attachments (volume, node, state, publish_context, updated_at) \
             VALUES (?1, ?2, ?3, '{}', ?4)",
            params![volume, node, state.as_str(), self.now],
        )?;
        Ok(())
    }

    fn set_attachment_state(
        &mut self,
        volume: &str,
        node: &str,
        state: AttachmentState,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE attachments SET state = ?1, updated_at = ?2, error = NULL, next_retry_at = NULL \
             WHERE volume = ?3 AND node = ?4",
            params![state.as_str(), self.now, volume, node],
        )?;
        Ok(())
    }

    fn set_attachment_detaching(
        &mut self,
        volume: &str,
        node: &str,
        forced: bool,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE attachments SET state = 'detaching', forced = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
             WHERE volume = ?3 AND node = ?4",
            params![forced, self.now, volume, node],
        )?;
        Ok(())
    }

    fn attachment_published(
        &mut self,
        volume: &str,
        node: &str,
        publish_context: &PublishContext,
    ) -> ApiResult<bool> {
        let updated = exec(
            self.tx,
            "UPDATE attachments SET state = 'attached', publish_context = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
             WHERE volume = ?3 AND node = ?4 AND state = 'attaching'",
            params![to_json(publish_context), self.now, volume, node],
        )?;
        Ok(updated > 0)
    }

    fn set_attachment_error(
        &mut self,
        volume: &str,
        node: &str,
        error: &str,
        next_retry_at: Option<i64>,
    ) -> ApiResult<bool> {
        let changed = exec(
            self.tx,
            "UPDATE attachments SET error = ?1, next_retry_at = ?2, updated_at = ?3 \
             WHERE volume = ?4 AND node = ?5",
            params![error, next_retry_at, self.now, volume, node],
        )?;
        Ok(changed > 0)
    }

    fn note_attach_waiting(&mut self, volume: &str, node: &str, why: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE attachments SET error = ?1 WHERE volume = ?2 AND node = ?3",
            params![why, volume, node],
        )?;
        exec(
            self.tx,
            "UPDATE claims SET error = ?1, modify_index = ?2 \
             WHERE volume = ?3 AND node = ?4 AND state IN ('attaching', 'pending')",
            params![why, self.index as i64, volume, node],
        )?;
        Ok(())
    }

    fn set_attach_retry(
        &mut self,
        volume: &str,
        node: &str,
        error: &str,
        next_retry_at: i64,
    ) -> ApiResult<()> {
        self.set_attachment_error(volume, node, error, Some(next_retry_at))?;
        exec(
            self.tx,
            "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 \
             WHERE volume = ?5 AND node = ?6 AND state IN ('attaching', 'pending')",
            params![
                error,
                next_retry_at,
                self.now,
                self.index as i64,
                volume,
                node
            ],
        )?;
        Ok(())
    }

    fn delete_attachment(&mut self, volume: &str, node: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM attachments WHERE volume = ?1 AND node = ?2",
            params![volume, node],
        )?;
        Ok(())
    }

    fn register_node(
        &mut self,
        name: &str,
        fence_after_ms: Option<u64>,
        labels: &BTreeMap<String, String>,
        plugins: &[PluginRegistration],
    ) -> ApiResult<()> {
        nodes::register_node(self, name, fence_after_ms, labels, plugins)
    }

    fn set_node_status(&mut self, name: &str, status: NodeStatus) -> ApiResult<()> {
        nodes::set_node_status(self, name, status)
    }

    fn set_node_stopped(&mut self, name: &str, took_down: bool) -> ApiResult<()> {
        nodes::set_node_stopped(self, name, took_down)
    }

    fn set_plugin_observed(&mut self, node: &str, plugin: &str, observed: &str) -> ApiResult<()> {
        nodes::set_plugin_observed(self, node, plugin, observed)
    }

    fn set_node_fenced_at(&mut self, name: &str, at_ms: i64) -> ApiResult<()> {
        nodes::set_node_fenced_at(self, name, at_ms)
    }

    fn ask_node_limits(&mut self, name: &str) -> ApiResult<()> {
        nodes::ask_node_limits(self, name)
    }

    fn set_node_limit(
        &mut self,
        node: &str,
        plugin: &str,
        limit: u32,
        reason: &str,
    ) -> ApiResult<Option<u32>> {
        nodes::set_node_limit(self, node, plugin, limit, reason)
    }

    fn queue_op(
        &mut self,
        kind: OpKind,
        plugin: &str,
        volume: &str,
        node: Option<&str>,
        payload: &str,
    ) -> ApiResult<()> {
        ops::queue_op(self, kind, plugin, volume, node, payload)
    }

    fn queue_held_op(
        &mut self,
        kind: OpKind,
        plugin: &str,
        volume: &str,
        payload: &str,
        why: &str,
    ) -> ApiResult<()> {
        held::queue(self.tx, self.now, kind, plugin, volume, payload, why)
    }

    fn release_held_op(&mut self, id: i64) -> ApiResult<()> {
        held::release(self.tx, self.now, id)
    }

    fn assign_op(&mut self, id: i64, host: &str) -> ApiResult<()> {
        ops::assign_op(self, id, host)
    }

    fn note_op_waiting(&mut self, id: i64, why: &str) -> ApiResult<bool> {
        ops::note_op_waiting(self, id, why)
    }

    fn retry_op(&mut self, id: i64, not_before: i64, error: &str) -> ApiResult<()> {
        ops::retry_op(self, id, not_before, error)
    }

    fn retarget_op(&mut self, id: i64, payload: &str) -> ApiResult<()> {
        ops::retarget_op(self, id, payload)
    }

    fn unassign_ops_of(&mut self, host: &str) -> ApiResult<()> {
        ops::unassign_ops_of(self, host)
    }

    fn delete_op(&mut self, id: i64) -> ApiResult<()> {
        ops::delete_op(self, id)
    }

    fn put_controller_findings(
        &mut self,
        plugin: &str,
        findings: &[csivol_rules::reconcile::Kept],
    ) -> ApiResult<()> {
        ops::put_controller_findings(self, plugin, findings)
    }

    fn delete_op_for(&mut self, kind: OpKind, volume: &str, node: &str) -> ApiResult<()> {
        ops::delete_op_for(self, kind, volume, node)
    }

    fn put_snapshot(&mut self, s: &crate::model::SnapshotRow) -> ApiResult<()> {
        snapshots::put(self.tx, s, self.index, self.now)
    }

    fn put_group_snapshot(&mut self, g: &crate::model::GroupSnapshotRow) -> ApiResult<()> {
        snapshots::put_group(self.tx, g, self.index, self.now)
    }

    fn delete_group_snapshot(&mut self, name: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM snapshots WHERE group_name = ?1",
            [name],
        )?;
        exec(
            self.tx,
            "DELETE FROM group_snapshots WHERE name = ?1",
            [name],
        )?;
        Ok(())
    }

    fn delete_snapshot(&mut self, name: &str) -> ApiResult<()> {
        exec(self.tx, "DELETE FROM snapshots WHERE name = ?1", [name])?;
        Ok(())
    }

    fn delete_key_op(&mut self, kind: OpKind, key: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM ops WHERE volume = ?1 AND kind = ?2 AND node IS NULL",
            params![key, kind.as_str()],
        )?;
        Ok(())
    }

    fn insert_token(&mut self, t: &TokenRow) -> ApiResult<()> {
        access::insert_token(self, t)
    }

    fn set_token_revoked(&mut self, id: &str, at: i64) -> ApiResult<()> {
        access::set_token_revoked(self, id, at)
    }

    fn set_token_last_used(&mut self, id: &str, at: i64) -> ApiResult<()> {
        access::set_token_last_used(self, id, at)
    }

    fn allow_controller_host(&mut self, plugin: &str, node: &str, actor: &str) -> ApiResult<bool> {
        access::allow_controller_host(self, plugin, node, actor)
    }

    fn disallow_controller_host(&mut self, plugin: &str, node: &str) -> ApiResult<bool> {
        access::disallow_controller_host(self, plugin, node)
    }

    fn set_node_eligibility(&mut self, name: &str, eligibility: api::Eligibility) -> ApiResult<()> {
        nodes::set_node_eligibility(self, name, eligibility)
    }

    fn delete_node(&mut self, name: &str) -> ApiResult<()> {
        nodes::delete_node(self, name)
    }

    fn set_node_operator_labels(
        &mut self,
        node: &str,
        labels: &BTreeMap<String, String>,
    ) -> ApiResult<()> {
        nodes::set_node_operator_labels(self, node, labels)
    }

    fn insert_fence(&mut self, f: &NewFence<'_>) -> ApiResult<u64> {
        nodes::insert_fence(self, f)
    }

    fn note_fence_failure(&mut self, node: &str, why: &str) -> ApiResult<()> {
        nodes::note_fence_failure(self, node, why)
    }

    fn set_node_fenced(&mut self, node: &str) -> ApiResult<()> {
        nodes::set_node_fenced(self, node)
    }

    fn set_claim_lease(
        &mut self,
        volume: &str,
        alloc: &str,
        ttl_ms: i64,
        expires_at: i64,
    ) -> ApiResult<()> {
        nodes::set_claim_lease(self, volume, alloc, ttl_ms, expires_at)
    }

    fn prune_events(&mut self, p: &crate::store::Pruning<'_>) -> ApiResult<usize> {
        listings::prune_events(self, p)
    }

    fn put_stored_secrets(&mut self, volume: &str, sealed: &str) -> ApiResult<()> {
        access::put_stored_secrets(self, volume, sealed)
    }

    fn put_secrets_check(&mut self, sealed: &str) -> ApiResult<()> {
        access::put_secrets_check(self, sealed)
    }

    fn keep_answer(&mut self, a: &crate::store::KeptAnswer) -> ApiResult<()> {
        retries::keep_answer(self, a)
    }

    fn put_tombstone(&mut self, volume: &str, alloc: &str) -> ApiResult<()> {
        retries::put_tombstone(self, volume, alloc)
    }

    fn prune_retries(&mut self, before: i64, most: usize) -> ApiResult<usize> {
        retries::prune_retries(self, before, most)
    }

    fn put_meta(&mut self, key: &str, value: Option<i64>) -> ApiResult<()> {
        access::put_meta(self, key, value)
    }
}
