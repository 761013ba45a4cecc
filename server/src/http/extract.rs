//! What a handler takes from a request besides the server's state: a JSON body and query
//! parameters whose faults are API errors, and names checked by the API's one rule.

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::response::Response;
use csivol_api::validate_name;
use serde::de::DeserializeOwned;

use super::error;
use crate::error::{ApiError, ApiResult};

/// A JSON body; malformed, unknown-field and oversize bodies become API errors.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    /// An API error with the status axum gives the rejection (400, 413, 415, 422).
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Self(v)),
            Err(rejection) => {
                let e = ApiError::bad_request(format!(
                    "invalid request body: {}",
                    rejection.body_text()
                ));
                Err(error::with_status(&e, rejection.status()))
            }
        }
    }
}

/// Query parameters; unknown or malformed ones become API errors.
pub struct Q<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| Self(v))
            .map_err(|r| ApiError::bad_request(format!("invalid query: {}", r.body_text())))
    }
}

/// A name by the API's one rule; a volume or a snapshot is named by its key
/// (`api::validate_key`), which the namespace layer made of the namespace and the name the
/// request gave.
pub(super) fn name(kind: &str, value: &str) -> ApiResult<()> {
    match kind {
        "volume" | "snapshot" | "group snapshot" | "pool" => csivol_api::validate_key(kind, value),
        _ => validate_name(kind, value),
    }
    .map_err(ApiError::invalid)
}
