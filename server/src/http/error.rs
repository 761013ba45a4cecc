//! The one place an error becomes an HTTP answer: each kind's status code, and the body
//! `{"error": {"code", "message", "hint"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use csivol_api::ErrorResponse;

use crate::error::{ApiError, Kind};

/// The status code of an error of `kind`.
pub fn status(kind: Kind) -> StatusCode {
    match kind {
        Kind::Malformed => StatusCode::BAD_REQUEST,
        // 422: no retry of the same request can succeed.
        Kind::Invalid | Kind::Topology => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
        Kind::Forbidden => StatusCode::FORBIDDEN,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::Blocked => StatusCode::LOCKED,
        Kind::Failed => StatusCode::BAD_GATEWAY,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `e` answered with `status` instead of its kind's (the node channel's 426).
pub fn with_status(e: &ApiError, status: StatusCode) -> Response {
    (status, axum::Json(ErrorResponse { error: e.body() })).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        with_status(&self, status(self.kind))
    }
}
