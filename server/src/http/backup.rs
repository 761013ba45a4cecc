//! `GET /v1/backup`: the state database's online backup, downloaded.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use csivol_api::INDEX_HEADER;

use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::store::sqlite::backup;

/// `GET /v1/backup`: a consistent snapshot of the state database, as one SQLite file.
pub(super) async fn download(State(app): State<App>, headers: HeaderMap) -> ApiResult<Response> {
    app.acting(&headers)?;
    let db = app.db.path().to_owned();
    let (summary, bytes) = tokio::task::spawn_blocking(move || {
        // The snapshot goes through a file beside the database (same filesystem, private
        // dir), read back and removed: the online backup API writes to a database file.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let to = db.with_file_name(format!("backup-{}-{n}.db", std::process::id()));
        let result = backup::backup(&db, &to).and_then(|s| Ok((s, std::fs::read(&to)?)));
        let _ = std::fs::remove_file(&to);
        result
    })
    .await
    .map_err(|e| ApiError::internal(format!("backup task failed: {e}")))?
    .map_err(|e| {
        ApiError::unavailable(format!("the backup failed: {e:#}")).with_hint(
            "`csivol-server backup --data-dir DIR --to FILE` on the server's machine does the same",
        )
    })?;
    let mut r = (
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/vnd.sqlite3".to_owned(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                "attachment; filename=\"csivol-state.db\"".to_owned(),
            ),
        ],
        bytes,
    )
        .into_response();
    if let Some(id) = summary
        .cluster_id
        .as_deref()
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        r.headers_mut().insert("x-csivol-cluster", id);
    }
    r.headers_mut()
        .insert(INDEX_HEADER, HeaderValue::from(summary.index as u64));
    Ok(r)
}
