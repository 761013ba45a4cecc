//! The server's error: an API error code, an HTTP status, a message and an optional hint,
//! rendered as `{"error": {"code", "message", "hint"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use csivol_api::{ErrorBody, ErrorCode, ErrorResponse};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub status: StatusCode,
    pub message: String,
    pub hint: Option<String>,
}

impl ApiError {
    fn new(code: ErrorCode, status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            code,
            status,
            message: message.into(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// A request that can never succeed as sent (422; 400 for malformed input).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(
            ErrorCode::Invalid,
            StatusCode::UNPROCESSABLE_ENTITY,
            message,
        )
    }

    /// Free text a client sent with a control character in it ([`csivol_api::check_text`]).
    pub fn control_text(message: impl Into<String>) -> Self {
        Self::invalid(message).with_hint(
            "remove the control character (an ESC, `\\r`, a tab, a newline...) from that field and send it again",
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Invalid, StatusCode::BAD_REQUEST, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, StatusCode::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, StatusCode::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, StatusCode::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, StatusCode::CONFLICT, message)
    }

    pub fn blocked(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Blocked, StatusCode::LOCKED, message)
    }

    /// The node lies outside the volume's accessible topology: 422, as no retry of the same
    /// request can succeed.
    pub fn topology(message: impl Into<String>) -> Self {
        Self::new(
            ErrorCode::Topology,
            StatusCode::UNPROCESSABLE_ENTITY,
            message,
        )
    }

    /// An action ran and did not succeed (a fence method that did not confirm the node off).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Failed, StatusCode::BAD_GATEWAY, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            ErrorCode::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            message,
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            ErrorCode::Internal,
            StatusCode::INTERNAL_SERVER_ERROR,
            message,
        )
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code,
            message: self.message.clone(),
            hint: self.hint.clone(),
        }
    }
}

impl From<rusqlite::Error> for ApiError {
    fn from(e: rusqlite::Error) -> Self {
        tracing::error!(error = %e, "database error");
        Self::internal(format!("database error: {e}"))
    }
}

impl From<serde_json::Error> for ApiError {
    fn from(e: serde_json::Error) -> Self {
        Self::internal(format!("stored JSON is unreadable: {e}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        (status, axum::Json(ErrorResponse { error: self.body() })).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
