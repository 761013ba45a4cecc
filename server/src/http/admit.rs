//! What a request must show before the server reads its body: a valid token (health
//! excepted), and then its whole body within the body timeout. A caller without a token is
//! answered from the headers alone, so it cannot hold a connection by sending a body
//! slowly; a caller with one gets `--body-timeout` for it. The connection of a request
//! that authenticated is kept at the connection limit (`listen::Admitted`).

use axum::body::HttpBody as _;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::listen::Admitted;
use super::{App, BODY_LIMIT, error};
use crate::error::ApiError;

/// The one endpoint that answers without a token: a load balancer or a person asks it
/// whether the server is up.
fn public(req: &Request) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD) && req.uri().path() == "/v1/health"
}

/// Authenticates from the headers, then reads the body within the body timeout.
pub(super) async fn admit(
    State(app): State<App>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    if !public(&req) {
        if let Err(e) = app.caller(req.headers()) {
            // The body is left unread: hyper drains what has already arrived and closes
            // the connection when more is due, so a slow body ends here.
            return e.into_response();
        }
        if let Some(conn) = req.extensions().get::<Admitted>() {
            conn.trust();
        }
    }
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let body = match tokio::time::timeout(app.body_timeout, read_body(body)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(refused)) => return refused,
        Err(_) => {
            let e = ApiError::unavailable(format!(
                "the request body did not arrive within {} (the server's --body-timeout)",
                humantime::format_duration(app.body_timeout)
            ))
            .with_hint(
                "send the request again over a faster link, or ask an operator to raise \
                 --body-timeout",
            );
            return error::with_status(&e, StatusCode::REQUEST_TIMEOUT);
        }
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(body)))
        .await
}

/// The whole body, at most [`BODY_LIMIT`] bytes: a larger one is refused (413) once its
/// bytes pass the limit, never read to its end. (Read up to there even when its length
/// says so at once: a client still sending a body the server has not read would see its
/// connection break before it reads the refusal.)
async fn read_body(body: axum::body::Body) -> Result<Vec<u8>, Response> {
    use tokio_stream::StreamExt as _;
    let too_large = || {
        let e = ApiError::bad_request(format!(
            "invalid request body: larger than the limit of {BODY_LIMIT} bytes"
        ));
        error::with_status(&e, StatusCode::PAYLOAD_TOO_LARGE)
    };
    let announced = body.size_hint().exact().unwrap_or(0);
    let mut got = Vec::with_capacity(usize::try_from(announced).unwrap_or(0).min(BODY_LIMIT));
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let bytes = frame.map_err(|e| {
            ApiError::bad_request(format!("failed to read the request body: {e}")).into_response()
        })?;
        if got.len() + bytes.len() > BODY_LIMIT {
            return Err(too_large());
        }
        got.extend_from_slice(&bytes);
    }
    Ok(got)
}
