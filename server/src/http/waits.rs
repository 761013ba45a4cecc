//! The `x-csivol-wait` request header: the caller follows the outcome of its request.

use axum::http::HeaderMap;
use csivol_api as api;

use crate::error::{ApiError, ApiResult};

/// Whether the caller follows the outcome of its request ([`api::WAIT_HEADER`]): what
/// only a release under way stands in the way of is then held until it has finished,
/// rather than refused. A value other than the one the API defines is refused, so that a
/// misspelt one is not taken for no wait.
pub(super) fn waits_for_release(headers: &HeaderMap) -> ApiResult<bool> {
    let Some(v) = headers.get(api::WAIT_HEADER) else {
        return Ok(false);
    };
    if v.as_bytes() == api::WAIT_FOR_RELEASE.as_bytes() {
        return Ok(true);
    }
    Err(ApiError::bad_request(format!(
        "header `{}` takes the value `{}`, not `{}`",
        api::WAIT_HEADER,
        api::WAIT_FOR_RELEASE,
        String::from_utf8_lossy(v.as_bytes()).escape_debug()
    ))
    .with_hint(format!(
        "send `{}: {}`, or leave the header out",
        api::WAIT_HEADER,
        api::WAIT_FOR_RELEASE
    )))
}
