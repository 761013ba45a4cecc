//! Reads and writes of namespaces, beside the store's main traits: every store that reads
//! the cluster state reads its namespaces ([`Snapshot`](super::Snapshot) requires
//! [`Namespaces`]) and every write transaction can make and forget one.

use rusqlite::Connection;

use crate::error::ApiResult;
use crate::store::sqlite::namespaces as sql;
use crate::store::sqlite::quotas;

pub use crate::store::sqlite::quotas::Bound;
use crate::store::sqlite::writer::WriteCtx;

pub use crate::store::sqlite::namespaces::Contents;

/// Which namespaces' events to read: every namespace's (`only` none), or those of the
/// volumes of `only`'s namespaces, and the events of no volume (a node's, a token's) when
/// `volumeless`.
#[derive(Debug, Clone, Default)]
pub struct NamespaceFilter {
    pub only: Option<Vec<String>>,
    pub volumeless: bool,
}

impl NamespaceFilter {
    /// `only` as the store's queries take it: a JSON array, or NULL for every namespace.
    pub fn only_json(&self) -> Option<String> {
        self.only
            .as_ref()
            .map(|o| serde_json::to_string(o).unwrap_or_else(|_| "[]".into()))
    }
}

/// Reads of namespaces.
pub trait Namespaces {
    /// Every namespace an operator made, by name, with when (unix ms); never `default`.
    fn namespaces(&self) -> ApiResult<Vec<(String, i64)>>;
    /// When a namespace an operator made was made; `None`: not made (or `default`).
    fn namespace(&self, name: &str) -> ApiResult<Option<i64>>;
    /// What lives in a namespace, with the keys of its first `first` volumes.
    fn namespace_contents(&self, name: &str, first: usize) -> ApiResult<Contents>;
    /// Whether the schema keeps namespaces other than `default`.
    fn namespaces_kept(&self) -> ApiResult<bool>;
    /// A namespace's quota; `None`: it has none.
    fn namespace_quota(&self, name: &str) -> ApiResult<Option<csivol_api::Quota>>;
    /// How much of `bound` a namespace uses.
    fn namespace_used(&self, name: &str, bound: Bound) -> ApiResult<u64>;
    /// Who in a namespace uses most of `bound`, and how much.
    fn namespace_most(&self, name: &str, bound: Bound) -> ApiResult<Option<(String, u64)>>;
}

/// Writes of namespaces.
pub trait NamespaceWrites {
    /// Records a namespace; whether it is new. Refused below the schema that keeps them.
    fn put_namespace(&mut self, name: &str) -> ApiResult<bool>;
    fn delete_namespace(&mut self, name: &str) -> ApiResult<()>;
    /// Sets a namespace's quota; one that bounds nothing removes it. Refused below the
    /// schema that keeps quotas.
    fn set_namespace_quota(&mut self, name: &str, quota: &csivol_api::Quota) -> ApiResult<()>;
}

impl Namespaces for Connection {
    fn namespaces(&self) -> ApiResult<Vec<(String, i64)>> {
        sql::namespaces(self)
    }

    fn namespace(&self, name: &str) -> ApiResult<Option<i64>> {
        sql::namespace(self, name)
    }

    fn namespace_contents(&self, name: &str, first: usize) -> ApiResult<Contents> {
        sql::contents(self, name, first)
    }

    fn namespaces_kept(&self) -> ApiResult<bool> {
        sql::kept(self)
    }

    fn namespace_quota(&self, name: &str) -> ApiResult<Option<csivol_api::Quota>> {
        quotas::quota(self, name)
    }

    fn namespace_used(&self, name: &str, bound: Bound) -> ApiResult<u64> {
        quotas::used(self, name, bound)
    }

    fn namespace_most(&self, name: &str, bound: Bound) -> ApiResult<Option<(String, u64)>> {
        quotas::most(self, name, bound)
    }
}

/// Reads inside a write see the transaction's own changes.
impl Namespaces for WriteCtx<'_> {
    fn namespaces(&self) -> ApiResult<Vec<(String, i64)>> {
        sql::namespaces(self.tx)
    }

    fn namespace(&self, name: &str) -> ApiResult<Option<i64>> {
        sql::namespace(self.tx, name)
    }

    fn namespace_contents(&self, name: &str, first: usize) -> ApiResult<Contents> {
        sql::contents(self.tx, name, first)
    }

    fn namespaces_kept(&self) -> ApiResult<bool> {
        sql::kept(self.tx)
    }

    fn namespace_quota(&self, name: &str) -> ApiResult<Option<csivol_api::Quota>> {
        quotas::quota(self.tx, name)
    }

    fn namespace_used(&self, name: &str, bound: Bound) -> ApiResult<u64> {
        quotas::used(self.tx, name, bound)
    }

    fn namespace_most(&self, name: &str, bound: Bound) -> ApiResult<Option<(String, u64)>> {
        quotas::most(self.tx, name, bound)
    }
}

impl NamespaceWrites for WriteCtx<'_> {
    fn put_namespace(&mut self, name: &str) -> ApiResult<bool> {
        sql::put(self, name)
    }

    fn delete_namespace(&mut self, name: &str) -> ApiResult<()> {
        quotas::forget(self, name)?;
        sql::delete(self, name)
    }

    fn set_namespace_quota(&mut self, name: &str, quota: &csivol_api::Quota) -> ApiResult<()> {
        quotas::set(self, name, quota)
    }
}
