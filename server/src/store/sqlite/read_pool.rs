//! The read connections: a pool of read-only connections to the state database, each read
//! in a transaction of its own (a consistent snapshot of what was committed), at most
//! [`READERS`] at once. In WAL mode a reader never waits for the writer.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};

use super::connection::{STATEMENT_CACHE, plan_once};
use crate::error::{ApiError, ApiResult};

/// Most reads running at once (each holds a read connection while it runs). Reads are
/// short; more of them than cores only adds connections, threads and memory.
const READERS: usize = 8;

/// The read connections of one database file, opened as reads need them and kept.
#[derive(Clone)]
pub(super) struct ReadPool {
    readers: Arc<Mutex<Vec<Connection>>>,
    /// Bounds concurrent reads, and so read connections and their page caches.
    slots: Arc<tokio::sync::Semaphore>,
    path: PathBuf,
}

impl ReadPool {
    pub(super) fn new(path: &Path) -> Self {
        Self {
            readers: Arc::new(Mutex::new(Vec::new())),
            slots: Arc::new(tokio::sync::Semaphore::new(READERS)),
            path: path.to_owned(),
        }
    }

    /// The database file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on a read connection, on a blocking thread.
    pub(super) async fn read<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> ApiResult<T> + Send + 'static,
    {
        let permit = self.permit().await?;
        let readers = Arc::clone(&self.readers);
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let r = read_on(&readers, &path, f);
            drop(permit);
            r
        })
        .await
        .map_err(|e| ApiError::internal(format!("read task failed: {e}")))?
    }

    /// Runs `f` on a read connection on the calling thread.
    pub(super) async fn read_small<T>(
        &self,
        f: impl FnOnce(&Connection) -> ApiResult<T>,
    ) -> ApiResult<T> {
        let _permit = self.permit().await?;
        read_on(&self.readers, &self.path, f)
    }

    async fn permit(&self) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| ApiError::unavailable("the database is closing"))
    }
}

/// Runs `f` in a read transaction on a pooled read connection (opened when none is free).
fn read_on<T>(
    readers: &Mutex<Vec<Connection>>,
    path: &Path,
    f: impl FnOnce(&Connection) -> ApiResult<T>,
) -> ApiResult<T> {
    let conn = readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let conn = match conn {
        Some(c) => c,
        None => {
            let c = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            c.busy_timeout(std::time::Duration::from_secs(10))?;
            c.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            plan_once(&c)?;
            c
        }
    };
    let result = {
        let tx = conn.unchecked_transaction()?;
        let scope = super::shape::in_transaction();
        let r = f(&tx);
        drop(scope);
        drop(tx);
        r
    };
    readers.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
    result
}
