//! Who a request comes from: the caller its bearer token names (what each route needs of
//! it is the table in `routes`), and the mutual-TLS check that a node token
//! comes with its node's certificate.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use csivol_api::Role;

use crate::app::App;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle::Limits;

/// Mutual TLS: a node token presented over a connection with a client certificate is
/// accepted only when the certificate names the token's node (a DNS name in its subject
/// alternative names), so a stolen token is useless without that node's key.
pub(super) async fn client_cert_names_the_node(
    State(app): State<App>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(super::listen::PeerCert(cert)) = req.extensions().get()
        && let Ok(caller) = app.caller(req.headers())
        && let (Role::Node, Some(node)) = (caller.role, caller.node.as_deref())
        && !cert_names(cert, node)
    {
        return ApiError::forbidden(format!(
            "the client certificate is not for node `{node}`, the node this token acts for"
        ))
        .with_hint(format!(
            "give the agent node {node}'s certificate (csivol-server tls init --node {node})"
        ))
        .into_response();
    }
    next.run(req).await
}

fn cert_names(cert: &rustls::pki_types::CertificateDer<'_>, node: &str) -> bool {
    let Ok(name) = rustls::pki_types::ServerName::try_from(node) else {
        return false;
    };
    webpki::EndEntityCert::try_from(cert)
        .is_ok_and(|c| c.verify_is_valid_for_subject_name(&name).is_ok())
}

impl App {
    /// The caller's name in the event log and the limits a write needs (the route's rule
    /// was checked before the handler ran).
    pub(super) fn acting(&self, headers: &HeaderMap) -> ApiResult<(String, Limits)> {
        Ok((self.caller(headers)?.actor(), self.limits.clone()))
    }

    pub(super) fn caller(&self, headers: &HeaderMap) -> ApiResult<Caller> {
        let header = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.tokens.authenticate(header, self.clock.now_ms())
    }
}
